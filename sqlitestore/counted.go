package sqlitestore

import "github.com/outboxkit/backpressure"

// countedRows is what a pending count recorded in a sweep transaction: the
// IDs of the rows it counted, per route in ID order, and the shard filter
// it counted with.
type countedRows struct {
	ids    map[backpressure.Route][]int64
	shards []byte // the shard filter's argument; nil for every shard, unless none
	none   bool   // no shard was owned: nothing was counted
}

func newCountedRows() *countedRows {
	return &countedRows{ids: map[backpressure.Route][]int64{}}
}

// filter records the shard filter of the count; a nil rec records nothing.
func (r *countedRows) filter(shards []byte, none bool) {
	if r != nil {
		r.shards, r.none = shards, none
	}
}

// byRoute returns the IDs map the count fills, nil for a nil rec.
func (r *countedRows) byRoute() map[backpressure.Route][]int64 {
	if r == nil {
		return nil
	}
	return r.ids
}
