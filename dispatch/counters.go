package dispatch

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// nsTally is one node's per-namespace counters since its last report (see
// [outbox.NamespaceCounters]): guarded by its operator's mu. It holds at
// most one entry per namespace seen in the interval (of a claimed row, a
// written result or a plan), and is emptied at every report.
type nsTally map[string]*outbox.NamespaceCounters

func (t nsTally) of(ns string) *outbox.NamespaceCounters {
	c := t[ns]
	if c == nil {
		c = &outbox.NamespaceCounters{Namespace: ns}
		t[ns] = c
	}
	return c
}

// sweptRows counts rows started and records plan's backlog and holds.
func (t nsTally) sweptRows(rows []outbox.Row, plan backpressure.Plan) {
	for i := range rows {
		t.of(rows[i].Namespace).Started++
	}
	for _, n := range plan.Namespaces {
		c := t.of(n.Namespace)
		c.Backlog, c.BacklogCapped = n.Pending+n.Claimed, n.Capped
		if n.Held > 0 {
			reason := n.Reason.String()
			if c.Held == nil {
				c.Held = map[string]int{}
			}
			if _, ok := c.Held[reason]; ok || len(c.Held) < outbox.MaxHeldReasons {
				c.Held[reason] = max(c.Held[reason], n.Held)
			}
		}
	}
}

// completed counts one written result that left its row in state after
// outcome.
func (t nsTally) completed(ns string, outcome outbox.Outcome, state outbox.State) {
	c := t.of(ns)
	switch {
	case state == outbox.StateSettled:
		c.Settled++
	case state == outbox.StateDead:
		c.Dead++
	case outcome == outbox.Retry:
		c.Failed++
	}
}

// take returns the counters sorted by namespace, at most
// outbox.MaxReportNamespaces of them and whether there were more, and
// empties t. A namespace's backlog carries over (it is a level, not a
// count): its entry stays, with zero counts.
func (t nsTally) take() ([]outbox.NamespaceCounters, bool) {
	out := make([]outbox.NamespaceCounters, 0, len(t))
	for ns, c := range t {
		out = append(out, *c)
		if c.Backlog == 0 {
			delete(t, ns)
			continue
		}
		t[ns] = &outbox.NamespaceCounters{Namespace: ns, Backlog: c.Backlog, BacklogCapped: c.BacklogCapped}
	}
	slices.SortFunc(out, func(a, b outbox.NamespaceCounters) int { return strings.Compare(a.Namespace, b.Namespace) })
	if len(out) > outbox.MaxReportNamespaces {
		return out[:outbox.MaxReportNamespaces], true
	}
	return out, false
}

// pruneEvery is how often a node with history on prunes the store's
// history ([outbox.Historian.PruneHistory]).
const pruneEvery = time.Minute

// appendHistory appends rep's counters as history points, and prunes the
// history at most every pruneEvery; failures are logged.
func (p *operator) appendHistory(ctx context.Context, rep outbox.NodeReport, at time.Time) {
	h := p.o.historian
	if h == nil || len(rep.Counters) == 0 {
		return
	}
	if err := h.AppendHistory(ctx, outbox.HistoryOf(rep, at, rep.CountersInterval)); err != nil && ctx.Err() == nil {
		p.r.log.Warn("dispatch: appending the history failed", "err", err)
	}
	if at.Sub(p.prunedAt) < pruneEvery {
		return
	}
	p.prunedAt = at
	if _, err := h.PruneHistory(ctx, at); err != nil && ctx.Err() == nil {
		p.r.log.Warn("dispatch: pruning the history failed", "err", err)
	}
}

// completed counts one written result, for the report.
func (p *operator) completed(ns string, outcome outbox.Outcome, state outbox.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.completed(ns, outcome, state)
}
