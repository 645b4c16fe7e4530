package backpressure

import (
	"errors"
	"testing"
)

// SetOwnedShards on a nil or zero Backpressure returns ErrInvalidConfig, as
// SetConfig does, rather than panicking or installing a fraction that no
// sweep can use; a valid fraction is checked only once b is usable.
func TestSetOwnedShardsNeedsNew(t *testing.T) {
	all, err := AllShards(4)
	if err != nil {
		t.Fatal(err)
	}
	var zero Backpressure
	for i, b := range []*Backpressure{nil, &zero} {
		for _, f := range []OwnedShardFraction{all, {}} {
			if err := b.SetOwnedShards(f); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("step %d: SetOwnedShards(%v) on a Backpressure not built with New = %v, want ErrInvalidConfig", i, f.Owned(), err)
			}
		}
	}
	if zero.OwnedShards().ShardCount() != 0 {
		t.Errorf("zero Backpressure after SetOwnedShards owns %v of %d shards, want the zero fraction", zero.OwnedShards().Owned(), zero.OwnedShards().ShardCount())
	}
}
