package limits

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidRoute reports whether a route of namespace and taskQueue passes
// outbox.Route.Validate, allocating nothing (ValidName).
func ValidRoute(namespace, taskQueue string) bool {
	return namespace != "" && ValidName(namespace, NamespaceBytes) && ValidName(taskQueue, TaskQueueBytes)
}

// ValidName reports whether CheckName(s, max) is "". The planner checks
// every route of every sweep with it, so it checks eight bytes at a time
// for the usual case, ASCII without NUL, and leaves the rest to validTail.
func ValidName(s string, max int) bool {
	if len(s) > max {
		return false
	}
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		v := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A byte ≥ 0x80 sets its high bit in v; a zero byte (and only a
		// zero byte, when no byte is ≥ 0x80) sets it in (v − lo) &^ v.
		if (v|(v-lo)&^v)&hi != 0 {
			return validTail(s[i:])
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return validTail(s[i:])
		}
	}
	return true
}

// validTail is ValidName's check of the bytes past the ASCII prefix.
func validTail(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// CheckName returns why s cannot name a namespace or task queue, or "".
func CheckName(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, over the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "holds a NUL byte"
	}
	return ""
}
