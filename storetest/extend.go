package storetest

import (
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testExtend checks [outbox.Completer.ExtendLeases]: a live lease is
// extended to now + Lease and keeps its row from being claimed until then;
// a lost lease (expired, re-claimed, settled, never held) is reported and
// its row left unchanged, never revived.
func testExtend[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("LiveLeaseExtended", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 3)...)
		rows := o.claimN("claim", 2, scope("a", "q", 2))
		half := (o.h.Lease / 2).Truncate(time.Millisecond)
		o.h.Advance(half)
		res := o.extend("extend", rows[1].Lease(), rows[0].Lease())
		end := o.h.Now().Add(o.h.Lease)
		for i, r := range []outbox.Row{rows[1], rows[0]} {
			if res[i].Err != nil || res[i].State != outbox.StateClaimed || !res[i].LeaseExpiresAt.Equal(end) {
				t.Errorf("extension of %q: Result = %+v, want State claimed, LeaseExpiresAt now+Lease = %v", r.DispatchKey, res[i], end)
			}
			if g := o.get(r.DispatchKey); !g.LeaseExpiresAt.Equal(end) || g.Token != r.Token || g.Attempts != 1 || !g.ClaimedAt.Equal(r.ClaimedAt) {
				t.Errorf("extended row %q = LeaseExpiresAt %v Token %d Attempts %d ClaimedAt %v; want %v, the claim's token %d, 1, %v",
					r.DispatchKey, g.LeaseExpiresAt, g.Token, g.Attempts, g.ClaimedAt, end, r.Token, r.ClaimedAt)
			}
		}
		// Past the original lease, before the extended one: still held.
		o.h.Advance(o.h.Lease - half + time.Millisecond)
		if c := o.countClaimed(o.all); c["a"] != 2 {
			t.Errorf("after the original lease ended: CountClaimedOutboxRows = %v, want a: 2 (extended)", c)
		}
		if got := o.keys(o.claim(o.all, scope("a", "q", 10))); len(got) != 1 || got[0] != "k-2" {
			t.Errorf("claim after the original lease ended = %v, want only the never-claimed k-2", got)
		}
		o.applied("settle under the extended lease", o.complete("settle", outbox.SettleRow(rows[0]))[0], outbox.StateSettled)
		// Past the extended lease: the other row is claimable again.
		o.h.Advance(half + time.Millisecond)
		if got := o.keys(o.claim(o.all, scope("a", "q", 10))); len(got) != 1 || got[0] != rows[1].DispatchKey {
			t.Errorf("claim after the extended lease ended = %v, want [%s]", got, rows[1].DispatchKey)
		}
	})

	t.Run("LostLeasesNotRevived", func(t *testing.T) {
		o := setupStore(t, newHarness)
		keys := messageKeys(msgs("a", "q", "k", 5))
		o.enqueue(msgs("a", "q", "k", 5)...)
		expired := o.claimN("claim k-0", 1, scope("a", "q", 1))[0]
		o.h.Advance(o.h.Lease + time.Millisecond)
		stale := o.claimN("claim k-0 again and k-1", 2, scope("a", "q", 2)) // k-0's new claim, k-1
		o.h.Advance(o.h.Lease + time.Millisecond)                           // both expire
		rows := map[string]outbox.Row{}
		for _, r := range o.claimN("claim k-2, k-3", 2, scope("a", "q", 2)) { // oldest claimable first: k-0, k-1 again
			rows[r.DispatchKey] = r
		}
		// k-0 and k-1 are held by a third claim now; settle k-1's.
		o.applied("settle k-1", o.complete("settle", outbox.SettleRow(rows["k-1"]))[0], outbox.StateSettled)
		live := o.claimN("claim k-2", 1, scope("a", "q", 1))[0]
		expiring := o.claimN("claim k-3", 1, scope("a", "q", 1))[0]
		_ = expiring
		before := o.snapshot(keys)
		ls := []outbox.Lease{
			expired.Lease(),                         // k-0's first claim
			rows["k-1"].Lease(),                     // settled
			{DispatchKey: "k-4", Token: live.Token}, // never claimed
			{DispatchKey: "no-such-row", Token: live.Token},
			live.Lease(),
		}
		res := o.extend("mixed extension", ls...)
		for i, l := range ls[:4] {
			o.lost("extension of a lost lease on "+l.DispatchKey, res[i], l)
		}
		if res[4].Err != nil || !res[4].LeaseExpiresAt.Equal(o.h.Now().Add(o.h.Lease)) {
			t.Errorf("extension of the live lease in a mixed batch: %+v, want LeaseExpiresAt %v", res[4], o.h.Now().Add(o.h.Lease))
		}
		o.lost("extension of k-0's second, stale claim", o.extend("stale extension", stale[0].Lease())[0], stale[0].Lease())
		o.unchanged("mixed extension", before, map[string]bool{"k-2": true})
		o.gone("mixed extension", "no-such-row")
		before = o.snapshot(keys)
		_, err := o.s.ExtendLeases(o.ctx, []outbox.Lease{live.Lease(), live.Lease()})
		o.invalidArgument("ExtendLeases naming k-2 twice", err)
		o.unchanged("ExtendLeases naming k-2 twice", before, nil)

		// An expired lease is not revived: the row is claimable at once.
		o.h.Advance(o.h.Lease + time.Millisecond) // k-0, k-2 (extended at an earlier now), k-3 expire
		before = o.snapshot(keys)
		res = o.extend("extension of expired leases", rows["k-0"].Lease(), expiring.Lease())
		o.lost("extension of k-0's expired lease", res[0], rows["k-0"].Lease())
		o.lost("extension of k-3's expired lease", res[1], expiring.Lease())
		o.unchanged("extension of expired leases", before, nil)
		if got := o.countPending(o.all, 10)[route("a", "q")]; got != 4 {
			t.Errorf("pending after extending expired leases = %d, want 4 (k-0, k-2, k-3, k-4)", got)
		}
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		o := setupStore(t, newHarness)
		// Every backend answers alike: an empty, non-nil slice.
		for _, none := range [][]outbox.Lease{nil, {}} {
			if res, err := o.s.ExtendLeases(o.ctx, none); err != nil || res == nil || len(res) != 0 {
				t.Errorf("ExtendLeases(%#v) = %#v, %v; want no results (an empty, non-nil slice) and no error", none, res, err)
			}
		}
	})
}
