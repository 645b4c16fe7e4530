package ctl

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// naivePrintable is the reference: every byte decodes to a rune (no
// invalid UTF-8) and every rune is strconv.IsPrint or in keep.
func naivePrintable(s, keep string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) && !strings.ContainsRune(keep, r) {
			return false
		}
	}
	return true
}

// TestDisplayProperty (issue 29, item 18): display leaves a printable name
// as it is and quotes any other so that it unquotes back to the name;
// displayText keeps printable text, newlines and tabs, and escapes the
// rest; neither ever puts a character a terminal acts on in its output;
// jsonText changes no JSON value.
func TestDisplayProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z \x00-\x1f\x7f\x{80}-\x{9f}\x{202e}\x{fffd}]*`),
			rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")) })).Draw(t, "s")
		d := display(s)
		if naivePrintable(s, "") {
			if d != s {
				t.Fatalf("display(%q) = %q, want it unchanged", s, d)
			}
		} else if u, err := strconv.Unquote(d); err != nil || u != s {
			t.Fatalf("display(%q) = %q, which unquotes to %q, %v", s, d, u, err)
		}
		if !naivePrintable(d, "") {
			t.Fatalf("display(%q) = %q holds a character that is not printable", s, d)
		}
		dt := displayText(s)
		if naivePrintable(s, "\n\t") != (dt == s) {
			t.Fatalf("displayText(%q) = %q", s, dt)
		}
		if !naivePrintable(dt, "\n\t") {
			t.Fatalf("displayText(%q) = %q holds a character that is not printable", s, dt)
		}
		b, err := json.Marshal(map[string]string{s: s})
		if err != nil {
			t.Fatal(err)
		}
		j := jsonText(b)
		var want, back map[string]string
		_ = json.Unmarshal(b, &want)
		if err := json.Unmarshal(j, &back); err != nil || !maps.Equal(back, want) {
			t.Fatalf("jsonText(%s) = %s, which decodes to %q (%v), not %q", b, j, back, err, want)
		}
		if !naivePrintable(string(j), "") {
			t.Fatalf("jsonText(%s) = %q holds a character that is not printable", b, j)
		}
	})
}
