package outbox

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// ErrPendingCap reports an Enqueue or EnqueueTx refused because it would
// leave a namespace holding more unfinished rows than its cap (see
// [PendingCaps]). Nothing of the batch was written; the detail is a
// [*PendingCapError].
var ErrPendingCap = errors.New("outbox: namespace over its pending-row cap")

// MaxPendingCap bounds a cap of [PendingCaps]: a store checks a cap by
// counting a namespace's unfinished rows up to the cap + 1, so the cap
// bounds the cost of that count.
const MaxPendingCap = 1 << 30

// PendingCaps caps how many unfinished rows a namespace may hold: rows not
// yet settled or dead-lettered (pending, scheduled, waiting out a retry
// delay, or claimed). A store with caps refuses an Enqueue or EnqueueTx
// after which a namespace would hold more than its cap, with a
// [*PendingCapError] (matching [ErrPendingCap]), and writes nothing of the
// batch. Rows the batch does not insert (a dispatch key the outbox already
// holds) do not count. The zero value caps nothing.
type PendingCaps struct {
	// Default is the cap of every namespace not listed in PerNamespace:
	// 0 for none, else 1 to MaxPendingCap.
	Default int
	// PerNamespace overrides Default per namespace: 1 to MaxPendingCap,
	// or 0 for no cap on that namespace. Keys must be namespaces a row can
	// have ([Route.Validate]). The stores copy the map.
	PerNamespace map[string]int
}

// Cap returns namespace's cap, or 0 for none.
func (c PendingCaps) Cap(namespace string) int {
	if n, ok := c.PerNamespace[namespace]; ok {
		return n
	}
	return c.Default
}

// Enabled reports whether some namespace may be capped.
func (c PendingCaps) Enabled() bool { return c.Default > 0 || len(c.PerNamespace) > 0 }

// Validate returns nil if every store accepts c, else an [*ArgumentError]
// for op naming the field (arg is the option's name, e.g.
// "Options.PendingCaps").
func (c PendingCaps) Validate(op, arg string) error {
	if c.Default < 0 || c.Default > MaxPendingCap {
		return &ArgumentError{Op: op, Arg: arg + ".Default", Reason: fmt.Sprintf("%d is outside 0..MaxPendingCap (%d)", c.Default, MaxPendingCap)}
	}
	for ns, n := range c.PerNamespace {
		a := arg + ".PerNamespace[" + strconv.Quote(ns) + "]"
		if err := (Route{Namespace: ns}).Validate(); err != nil {
			return &ArgumentError{Op: op, Arg: a, Reason: "no row can have this namespace"}
		}
		if n < 0 || n > MaxPendingCap {
			return &ArgumentError{Op: op, Arg: a, Reason: fmt.Sprintf("%d is outside 0..MaxPendingCap (%d)", n, MaxPendingCap)}
		}
	}
	return nil
}

// Capped returns the distinct namespaces of msgs that have a cap, sorted
// (the order a store locks them in), with their caps.
func (c PendingCaps) Capped(msgs []Message) (namespaces []string, caps []int) {
	if !c.Enabled() {
		return nil, nil
	}
	seen := map[string]bool{}
	for i := range msgs {
		ns := msgs[i].Namespace
		if !seen[ns] {
			seen[ns] = true
			if c.Cap(ns) > 0 {
				namespaces = append(namespaces, ns)
			}
		}
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		caps = append(caps, c.Cap(ns))
	}
	return namespaces, caps
}

// PendingCapError is the detail of [ErrPendingCap].
type PendingCapError struct {
	Op        string // "Enqueue" or "EnqueueTx"
	Namespace string
	Cap       int // the namespace's cap
}

// Error names the call, the namespace and its cap.
func (e *PendingCapError) Error() string {
	return fmt.Sprintf("outbox: %s: namespace %q would hold more than its cap of %d unfinished rows; nothing of the batch was written", e.Op, e.Namespace, e.Cap)
}

// Is reports whether target is [ErrPendingCap].
func (e *PendingCapError) Is(target error) bool { return target == ErrPendingCap }
