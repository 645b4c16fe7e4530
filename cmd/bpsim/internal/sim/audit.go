package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxkit/backpressure/outbox"
)

// Audit is the exactly-once verdict of one policy run, read back from the
// database after every row was settled.
//
// Exactly-once holds when every dispatch key the run enqueued is in the
// database, settled, and was claimed once ([Audit.OK]).
type Audit struct {
	Keys        int `json:"keys"`        // dispatch keys the run enqueued
	SettledOnce int `json:"settledOnce"` // read back settled, with exactly one claim
	Lost        int `json:"lost"`        // not in the database at all
	Unsettled   int `json:"unsettled"`   // in the database but not settled
	// Rejected counts rows the store refused to enqueue (a tenant over its
	// pending cap): never written, as a refused batch must be, so neither
	// lost nor redelivered. RejectedFound counts refused keys read back
	// from the database all the same (0 is the promise).
	Rejected      int `json:"rejected,omitempty"`
	RejectedFound int `json:"rejectedFound,omitempty"`
	// Held counts rows of tenants paused at the end that were never
	// claimed: pending, untouched, as a paused tenant's rows must be. The
	// run does not wait for them.
	Held int `json:"held"`
	// RunTwice counts keys read back with more claims than the run
	// expects: one, plus one for each claim a failed node left to run out
	// (Recovered).
	RunTwice int `json:"runTwice"`

	// Recovered counts claims of a failed node's rows taken anew after
	// their leases ran out: the crash's rows coming back, as they must.
	// Each such row is still settled once.
	Recovered int `json:"recovered"`

	// ClaimedAgain counts claims the run saw of a key it had claimed before
	// (the database's view is RunTwice; this is the dispatchers').
	ClaimedAgain int `json:"claimedAgain"`

	// LeaseLost counts settles the store refused because the worker's
	// claim was no longer the row's live claim.
	LeaseLost int `json:"leaseLost"`

	// Redelivered is how many dispatch keys were enqueued a second time at
	// the end, as duplicates, as a producer retrying after a lost
	// acknowledgement would; RedeliveredInserted is how many of them the
	// store inserted again (dedup on dispatch_key says 0).
	Redelivered         int `json:"redelivered"`
	RedeliveredInserted int `json:"redeliveredInserted"`

	// Examples names a few keys that broke the rule, for the error message.
	Examples []string `json:"examples,omitempty"`
}

// OK reports whether exactly-once held: every key settled once, none lost,
// none run twice, and redelivery inserted nothing.
func (a Audit) OK() bool {
	return a.SettledOnce+a.Held+a.Rejected == a.Keys && a.RejectedFound == 0 && a.Lost == 0 && a.Unsettled == 0 && a.RunTwice == 0 &&
		a.ClaimedAgain == 0 && a.LeaseLost == 0 && a.RedeliveredInserted == 0
}

// String states the verdict in one line.
func (a Audit) String() string {
	if a.OK() {
		held := ""
		if a.Held > 0 {
			held = fmt.Sprintf(" (%d of a paused tenant held pending, untouched)", a.Held)
		}
		if a.Recovered > 0 {
			held += fmt.Sprintf(" (%d left claimed by a failed node, claimed anew after their leases ran out)", a.Recovered)
		}
		if a.Rejected > 0 {
			held += fmt.Sprintf(" (%d refused at enqueue over a pending cap, none written)", a.Rejected)
		}
		return fmt.Sprintf("exactly-once: ok — %d of %d dispatch keys settled once%s, none lost; %d re-enqueued as duplicates, %d inserted again",
			a.SettledOnce, a.Keys, held, a.Redelivered, a.RedeliveredInserted)
	}
	return fmt.Sprintf("exactly-once: FAILED — %d of %d settled once, %d rejected (%d of them written all the same), %d lost, %d unsettled, %d run twice, %d claimed again while running, %d settles refused (lease lost), %d of %d duplicates inserted again; e.g. %v",
		a.SettledOnce, a.Keys, a.Rejected, a.RejectedFound, a.Lost, a.Unsettled, a.RunTwice, a.ClaimedAgain, a.LeaseLost, a.RedeliveredInserted, a.Redelivered, a.Examples)
}

const maxExamples = 5

// audit re-enqueues every key, then reads each one back.
// auditStore is what the audit reads and writes: a [*simStore].
type auditStore interface {
	Enqueue(ctx context.Context, msgs []outbox.Message) (int, error)
	Inspect(ctx context.Context, key string) (rowState, error)
}

// expected is each key's expected claims; nil or 0 means one (a key never
// claimed has 0 attempts and is judged by its state alone). rejected (nil:
// none) marks the keys the store refused at enqueue: they are not
// redelivered, and must not be in the database.
func audit(ctx context.Context, ob auditStore, s Scenario, w *workload, held, rejected []bool, expected []int, a *Audit) error {
	a.Keys = len(w.arrivals)
	var sent []arrival
	for i, r := range w.arrivals {
		if i < len(rejected) && rejected[i] {
			a.Rejected++
			continue
		}
		sent = append(sent, r)
	}
	for lo := 0; lo < len(sent); lo += enqueueChunk {
		batch := sent[lo:min(lo+enqueueChunk, len(sent))]
		msgs := make([]outbox.Message, len(batch))
		for i, r := range batch {
			msgs[i] = r.message(s)
		}
		n, err := ob.Enqueue(ctx, msgs)
		if err != nil {
			return fmt.Errorf("redelivery: %w", err)
		}
		a.Redelivered += len(msgs)
		a.RedeliveredInserted += n
	}
	for i, r := range w.arrivals {
		want := 1
		if i < len(expected) && expected[i] > 1 {
			want = expected[i]
		}
		st, err := ob.Inspect(ctx, r.key)
		if err != nil {
			return fmt.Errorf("reading back %q: %w", r.key, err)
		}
		if i < len(rejected) && rejected[i] {
			if st.Found {
				a.RejectedFound++
				if len(a.Examples) < maxExamples {
					a.Examples = append(a.Examples, r.key+" (refused at enqueue, yet "+st.State+")")
				}
			}
			continue
		}
		// A key claimed more than once was run twice, whether or not it
		// was settled in the end.
		var bad []string
		if !st.Found {
			a.Lost++
			bad = append(bad, "lost")
		} else {
			if st.Attempts > want {
				a.RunTwice++
				bad = append(bad, fmt.Sprintf("%d claims", st.Attempts))
			}
			if !st.Settled && held[r.tenant] && st.Attempts == 0 && st.State == string(outbox.StatePending) {
				a.Held++
				continue
			}
			if !st.Settled {
				a.Unsettled++
				bad = append(bad, st.State)
			}
			if len(bad) == 0 {
				a.SettledOnce++
			}
		}
		if len(bad) > 0 && len(a.Examples) < maxExamples {
			a.Examples = append(a.Examples, r.key+" ("+strings.Join(bad, ", ")+")")
		}
	}
	return nil
}
