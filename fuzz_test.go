package backpressure

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"testing"
)

// FuzzPlan decodes arbitrary bytes into a config and a snapshot, possibly
// malformed, and checks that Plan never panics, rejects what it must with a
// typed error, and otherwise keeps every invariant. make fuzz runs it.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{10, 3, 1, 5, 2, 7, 0, 9, 1, 4})
	f.Add([]byte{1, 255, 0, 0, 0, 1, 1, 1, 1, 1, 200, 3})
	f.Add([]byte{60, 0, 2, 2, 2, 2, 3, 3, 3, 3, 250, 251})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		shardCount := next()%16 + 1
		var owned []int
		mask := next()<<8 | next()
		for s := 0; s < shardCount; s++ {
			if mask&(1<<s) != 0 {
				owned = append(owned, s)
			}
		}
		frac, err := NewOwnedShardFraction(owned, shardCount)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{BatchSize: next()%64 + 1, DefaultQuota: next()%40 - 1, Quotas: map[string]int{}}
		if cfg.DefaultQuota == 0 {
			cfg.DefaultQuota = Unlimited
		}
		snap := Snapshot{Claimed: map[string]int{}}
		malformed := false
		for len(data) > 0 {
			op := next()
			ns := fmt.Sprintf("n%d", next()%6)
			v := next() - 8 // sometimes negative
			switch op % 5 {
			case 0:
				if v < -1 {
					v = 0
				}
				cfg.Quotas[ns] = v
			case 4:
				if cfg.Weights == nil {
					cfg.Weights = map[string]int{}
				}
				cfg.Weights[ns] = (v+8)%8 + 1 // 1 to 8
				if v+8 >= 250 {
					cfg.Weights[ns] = maxWeight
				}
			case 1:
				snap.Claimed[ns] = v
			default:
				tq := fmt.Sprintf("q%d", op%5)
				for _, rc := range snap.Pending {
					if rc.Route == (Route{Namespace: ns, TaskQueue: tq}) {
						malformed = true
					}
				}
				if v < 0 {
					malformed = true
				}
				snap.Pending = append(snap.Pending, RouteCount{Route: Route{Namespace: ns, TaskQueue: tq}, Count: v})
			}
		}
		for _, c := range snap.Claimed {
			if c < 0 {
				malformed = true
			}
		}
		b, err := New(cfg, frac)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		p, err := b.Plan(snap)
		if malformed != (err != nil) {
			t.Fatalf("Plan(%+v): err = %v, malformed = %v", snap, err, malformed)
		}
		if err == nil {
			verifyPlan(t, world{cfg: cfg, frac: frac, snap: snap}, p)
		}
	})
}

// FuzzGateVerify checks Verify against capacity ≥ watermark + in-flight
// computed in 128 bits, for any ints: never a panic, invalid gates are ErrInvalidConfig
// and nothing else, and an overflow verdict exactly when the headroom is
// short. make fuzz runs it.
func FuzzGateVerify(f *testing.F) {
	f.Add(false, 10000, 7000, 5000, false)
	f.Add(false, 12000, 7000, 5000, false)
	f.Add(true, -1, 0, 0, true)
	f.Add(false, math.MaxInt, math.MaxInt, 1, false)
	f.Fuzz(func(t *testing.T, enforced bool, capacity, watermark, inflight int, verified bool) {
		g := BackpressureGate{Enforced: enforced, QueueCapacity: capacity, HighWatermark: watermark, ProducerMaxInflight: inflight, ProducerComplianceVerified: verified}
		err := g.Verify()
		invalid := capacity < 0 || watermark < 0 || inflight < 0 || watermark > capacity
		var overflow *AdvisoryOverflowError
		switch {
		case invalid:
			if !errors.Is(err, ErrInvalidConfig) || errors.As(err, &overflow) {
				t.Fatalf("%+v: Verify() = %v, want ErrInvalidConfig only", g, err)
			}
		case enforced || verified:
			if err != nil {
				t.Fatalf("%+v: Verify() = %v, want nil", g, err)
			}
		default:
			need := new(big.Int).Add(big.NewInt(int64(watermark)), big.NewInt(int64(inflight)))
			short := big.NewInt(int64(capacity)).Cmp(need) < 0
			if short != errors.As(err, &overflow) || !short && err != nil {
				t.Fatalf("%+v: Verify() = %v, want overflow %v", g, err, short)
			}
		}
	})
}
