package backpressure

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/backpressure/internal/limits"
)

// The longest namespace and task queue a route may have, in bytes:
// exported to store users as outbox.MaxNamespaceBytes and
// outbox.MaxTaskQueueBytes, beside the other limits of a message.
const (
	maxNamespaceBytes = limits.NamespaceBytes
	maxTaskQueueBytes = limits.TaskQueueBytes
)

// ErrInvalidRoute reports a route that no store may hold and the planner
// never plans: see [Route.Validate].
var ErrInvalidRoute = errors.New("backpressure: invalid route")

// RouteError describes why [Route.Validate] rejected a route. It matches
// [ErrInvalidRoute].
type RouteError struct {
	Route  Route
	Field  string // "namespace" or "task queue"
	Reason string
}

// Error names the route, the field and why no row may have it.
func (e *RouteError) Error() string {
	return fmt.Sprintf("backpressure: invalid route %q: %s %s", e.Route.String(), e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidRoute].
func (e *RouteError) Is(target error) bool { return target == ErrInvalidRoute }

// Validate is the one rule for what a route is, shared by the planner,
// [Config.Quotas] and every store's Enqueue. It returns nil exactly when
//
//   - the namespace is 1 to 255 bytes;
//   - the task queue is 0 to 255 bytes ("" is the
//     namespace's default task queue, a route like any other);
//   - both are valid UTF-8 and hold no NUL byte;
//
// and otherwise a *[RouteError] naming the first field that fails, the
// namespace first. Cost: O(len(Namespace) + len(TaskQueue)).
func (r Route) Validate() error {
	if r.Namespace == "" {
		return &RouteError{Route: r, Field: "namespace", Reason: "is empty"}
	}
	if reason := checkName(r.Namespace, maxNamespaceBytes); reason != "" {
		return &RouteError{Route: r, Field: "namespace", Reason: reason}
	}
	if reason := checkName(r.TaskQueue, maxTaskQueueBytes); reason != "" {
		return &RouteError{Route: r, Field: "task queue", Reason: reason}
	}
	return nil
}

// valid reports whether r.Validate() is nil, with the planner's check
// (validName), which allocates nothing.
func (r Route) valid() bool {
	return r.Namespace != "" && validName(r.Namespace, maxNamespaceBytes) && validName(r.TaskQueue, maxTaskQueueBytes)
}

// validName reports whether checkName(s, max) is "". The planner checks
// every route of every sweep with it, so it checks eight bytes at a time
// for the usual case, ASCII without NUL, and leaves the rest to validTail.
func validName(s string, max int) bool {
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

// validTail is validName's check of the bytes past the ASCII prefix.
func validTail(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// checkName returns why s cannot name a namespace or task queue, or "".
func checkName(s string, max int) string {
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
