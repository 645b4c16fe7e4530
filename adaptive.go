package backpressure

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// adaptState is one namespace's adaptive ceiling on this node, as
// SetAdaptiveCeiling last set it: a ceiling (0: none) and the end of a
// hold (zero: none).
type adaptState struct {
	ceiling int
	until   time.Time
}

// SetAdaptiveCeiling sets this node's adaptive ceiling of namespace, the
// planner input of a controller that learns from a downstream's advisory
// signals (package dispatch's Options.Adaptive): from the next plan on,
// namespace's ceiling on this node is min(Ceiling(namespace), ceiling), so
// an adaptive ceiling lowers the static one and never raises it, and
// while the plan's time is before holdUntil the namespace's demand is 0
// and its rows are held, reason [HeldAdaptive]. ceiling 0 means none (the
// static ceiling alone); a zero holdUntil, or one already past, means no
// hold. Ceiling 0 with no hold to come clears the namespace's entry. Like the static ceiling it is a
// per-node bound, this node's share, set by this node's controller: nodes
// share no counter. [NamespaceReport] shows it (Adaptive, Hold).
//
// The Backpressure holds one entry per namespace with an adaptive ceiling
// or a hold; its caller clears the entries it no longer needs. It returns
// an error matching [ErrInvalidConfig] (a *[ConfigError]), and changes
// nothing, for a negative ceiling or a namespace no row can have (one
// [outbox.Route.Validate] rejects), and for a Backpressure not built with [New].
func (b *Backpressure) SetAdaptiveCeiling(namespace string, ceiling int, holdUntil time.Time) error {
	if b == nil || b.e.sem == nil {
		return errNotNew
	}
	field := "AdaptiveCeiling[" + strconv.Quote(namespace) + "]"
	if err := outbox.CheckNamespace(field, namespace, ceiling); err != nil {
		return err
	}
	if ceiling < 0 {
		return &ConfigError{Field: field, Value: ceiling, Reason: "must be at least 0 (none)"}
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ceiling == 0 && !holdUntil.After(now) {
		delete(b.adapt, namespace)
	} else {
		if b.adapt == nil {
			b.adapt = make(map[string]adaptState)
		}
		b.adapt[namespace] = adaptState{ceiling: ceiling, until: holdUntil}
	}
	b.adaptOn.Store(len(b.adapt) > 0)
	return nil
}

// adaptiveAt fills in the adaptive ceiling and hold of every namespace of
// ns that has one at t. The caller holds the engine; it takes b.mu.
// Cost: O(A·log N) for A entries and N namespaces.
func (b *Backpressure) adaptiveAt(ns []nsWork, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, a := range b.adapt {
		i, ok := slices.BinarySearchFunc(ns, name, func(w nsWork, name string) int {
			return strings.Compare(w.Namespace, name)
		})
		if !ok {
			continue
		}
		ns[i].Adaptive = a.ceiling // clamped by effectiveCeiling
		if t.Before(a.until) {
			ns[i].Hold = a.until.Sub(t)
		}
	}
}

// effectiveCeiling is w's ceiling under its adaptive one, which
// adaptiveAt set in w.Adaptive: min(Ceiling, Adaptive), an Adaptive of 0
// dropping out; it clamps w.Adaptive to it (never above Ceiling).
func (w *nsWork) effectiveCeiling() int {
	if w.Adaptive > 0 && w.Ceiling != Unlimited && w.Adaptive > w.Ceiling {
		w.Adaptive = w.Ceiling
	}
	if w.Adaptive > 0 {
		return w.Adaptive
	}
	return w.Ceiling
}

// adaptiveBinds reports whether w's adaptive ceiling is below its static
// one: then rows held at the ceiling are held by it.
func (w *nsWork) adaptiveBinds() bool {
	return w.Adaptive > 0 && (w.Ceiling == Unlimited || w.Adaptive < w.Ceiling)
}
