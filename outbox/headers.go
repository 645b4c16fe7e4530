package outbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits of [Message.Headers], which every store enforces in Enqueue with a
// [*MessageError] (Field "Headers"). Headers are small metadata beside the
// payload, such as a W3C traceparent: not a second payload.
const (
	// MaxHeaders bounds the number of headers of one message.
	MaxHeaders = 16
	// MaxHeaderKeyBytes bounds a header's key, which must be at least 1
	// byte of ASCII letters, digits, '-', '_' and '.'.
	MaxHeaderKeyBytes = 64
	// MaxHeaderBytes bounds the sum of a message's header keys' and
	// values' lengths (a W3C traceparent is 66 bytes with its key).
	MaxHeaderBytes = 2048
)

// validateHeaders returns why h breaks a limit of [Message.Headers], or "".
func validateHeaders(h map[string]string) string {
	if len(h) > MaxHeaders {
		return fmt.Sprintf("has %d entries, over the limit of %d", len(h), MaxHeaders)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(h)) { // the first bad key, in a stable order
		v := h[k]
		switch {
		case k == "":
			return "has an empty key"
		case len(k) > MaxHeaderKeyBytes:
			return fmt.Sprintf("key %.16q… is %d bytes, over the limit of %d", k, len(k), MaxHeaderKeyBytes)
		case strings.IndexFunc(k, badKeyRune) >= 0:
			return fmt.Sprintf("key %q holds a character other than ASCII letters, digits, '-', '_' and '.'", k)
		case !utf8.ValidString(v):
			return fmt.Sprintf("value of %q is not valid UTF-8", k)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Sprintf("value of %q holds a NUL byte", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxHeaderBytes {
		return fmt.Sprintf("total %d bytes of keys and values, over the limit of %d", size, MaxHeaderBytes)
	}
	return ""
}

func badKeyRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

// EncodeHeaders returns h as a store keeps it: a JSON object with sorted
// keys, or nil for no headers (nil or empty h). h must have passed
// [Message.Validate]. For store implementations.
func EncodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	b, _ := json.Marshal(h) // a map[string]string of valid UTF-8 always encodes
	return b
}

// DecodeHeaders is the inverse of [EncodeHeaders]: nil for a nil or empty
// b, else the object's entries. A b that is not a JSON object of strings
// is an error (a store reports it as a row it cannot read). For store
// implementations.
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("outbox: row headers: %w", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}
