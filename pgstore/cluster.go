package pgstore

import (
	"context"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
)

// Cluster returns the store's membership as a [dispatch.Cluster], for a
// [dispatch.Service]: its Join is [Store.Join] with opts, under the
// service's node name unless opts.Node is set, and the member it returns
// claims through the fenced store ([Membership.Store]). The service
// follows the member's shards and leaves at Stop.
//
//	svc, err := dispatch.NewService(store, handle, dispatch.ServiceOptions{
//		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
//		Options: dispatch.Options{Workers: 32},
//		Cluster: store.Cluster(pgstore.MembershipOptions{}),
//	})
func (s *Store) Cluster(opts MembershipOptions) dispatch.Cluster {
	return cluster{s: s, opts: opts}
}

type cluster struct {
	s    *Store
	opts MembershipOptions
}

// Join joins the store's schema as node (unless the options name one).
func (c cluster) Join(ctx context.Context, node string) (dispatch.Member, error) {
	o := c.opts
	if o.Node == "" {
		o.Node = node
	}
	m, err := c.s.Join(ctx, o)
	if err != nil {
		return nil, err
	}
	return member{m}, nil
}

// member is a *Membership as a dispatch.Member: its Store is the fenced
// view, typed as dispatch.Store.
type member struct{ *Membership }

func (m member) Store() dispatch.Store { return m.Membership.Store() }

// Owned, Changes, Node, LeaseExpiresAt and Leave are the Membership's.
var _ dispatch.Member = member{}

// LeaseExpiresAt returns the instant from which [Membership.Owned] may no
// longer be true: a Lease after the last heartbeat confirmed in time was
// sent, on this process's monotonic clock. It is the zero time before the
// first such heartbeat, after [Membership.Leave] or once its store is
// closed, and once a heartbeat found the name taken or its reply came too
// late; a time in the past once the lease lapsed unrenewed.
func (m *Membership) LeaseExpiresAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left || m.store.closed.Load() {
		return time.Time{}
	}
	return m.validUntil
}
