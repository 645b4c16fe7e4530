package admin

import (
	"encoding/hex"
	"unicode/utf8"

	"github.com/outboxkit/backpressure/outbox"
)

// MaxPayloadView is the most bytes of a payload the payload view shows.
const MaxPayloadView = 64 << 10

// payloadData is the payload view's: the row and its payload, cut at
// MaxPayloadView bytes (at a UTF-8 boundary), as text when it is valid
// UTF-8, else as hex. The template escapes it.
type payloadData struct {
	Row         outbox.Row
	Body        string
	Size, Shown int
	Max         int
	Cut, Text   bool
}

func payloadOf(r outbox.Row) payloadData {
	p := r.Payload
	d := payloadData{Row: r, Size: len(p), Max: MaxPayloadView}
	if len(p) > MaxPayloadView {
		p, d.Cut = p[:MaxPayloadView], true
		for i := 0; i < utf8.UTFMax-1 && len(p) > 0 && !utf8.Valid(p); i++ {
			p = p[:len(p)-1] // a rune cut by the cap
		}
	}
	if utf8.Valid(p) {
		d.Body, d.Text = string(p), true
	} else {
		p = p[:min(len(p), MaxPayloadView/2)]
		d.Body = hex.EncodeToString(p)
	}
	d.Shown = len(p)
	d.Row.Payload = nil
	return d
}
