package sim

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSampleScenarioIsTheDefault(t *testing.T) {
	got, err := LoadScenario("../../scenario.sample.json")
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultScenario(); !reflect.DeepEqual(got, want) {
		t.Errorf("scenario.sample.json = %+v\nwant DefaultScenario() = %+v", got, want)
	}
}

func TestDefaultScenarioIsValid(t *testing.T) {
	if err := DefaultScenario().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestScenarioJSONRoundTrip(t *testing.T) {
	s := DefaultScenario()
	st := ServiceTime{Min: 200 * time.Millisecond, Max: 200 * time.Millisecond}
	s.Tenants[1].ServiceTime = &st
	s.Tenants[2].Arrivals = append(s.Tenants[2].Arrivals,
		Arrival{Pattern: PatternSteady, PerSecond: 0.5, From: 10 * time.Second, Until: 20 * time.Second},
		Arrival{Pattern: PatternBurst, Rows: 7, At: 30 * time.Second})
	roundTrip(t, s)
}

// roundTrip returns s marshalled and parsed again, failing t unless it is
// s unchanged.
func roundTrip(t *testing.T, s Scenario) Scenario {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseScenario(b)
	if err != nil {
		t.Fatalf("ParseScenario(MarshalJSON(s)): %v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip changed the scenario:\n got %+v\nwant %+v", got, s)
	}
	return got
}

// TestLimitsScenarioRoundTrip checks that rates, priorities and pending
// caps survive MarshalJSON and ParseScenario.
func TestLimitsScenarioRoundTrip(t *testing.T) {
	s := DefaultScenario()
	s.PendingCap = 500
	s.Tenants[0].Rate.PerSecond, s.Tenants[0].Rate.Burst = 12.5, 7
	s.Tenants[0].Priorities = []PriorityShare{{Priority: 100, Fraction: 0.1}, {Priority: -3, Fraction: 0.25}}
	s.Tenants[0].PendingCap = 40
	s.Tenants[1].PendingCap = -1
	got := roundTrip(t, s)
	if c := got.pendingCaps(); c.Default != 500 || c.Cap("bursty") != 40 || c.Cap("quiet-1") != 0 || c.Cap("quiet-2") != 500 {
		t.Errorf("pendingCaps() = %+v", c)
	}
}

// TestHandoffScenarioRoundTrip checks that failAt, joinAt and
// membershipLease survive MarshalJSON and ParseScenario.
func TestHandoffScenarioRoundTrip(t *testing.T) {
	s := handoffScenario()
	s.MembershipLease = 1500 * time.Millisecond
	s.Apportionment = "ceil"
	roundTrip(t, s)
}

func TestParseScenarioDefaults(t *testing.T) {
	s, err := ParseScenario([]byte(`{"tenants": [{"name": "a", "quota": -1, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultScenario()
	if s.Nodes != def.Nodes || s.ShardCount != def.ShardCount || s.BatchSize != def.BatchSize ||
		s.Tick != def.Tick || s.Duration != def.Duration || s.Lease != def.Lease || s.ServiceTime != def.ServiceTime {
		t.Errorf("left-out fields = %+v, want the default scenario's", s)
	}
	if s.WorkersPerNode != 0 {
		t.Errorf("workersPerNode left out = %d, want 0 (unlimited)", s.WorkersPerNode)
	}
	if s.Tenants[0].Queues != 1 {
		t.Errorf("queues left out = %d, want 1", s.Tenants[0].Queues)
	}
}

// TestParseScenarioErrors checks that each bad scenario is rejected with a
// *ScenarioError naming the field, with the problem in its message.
func TestParseScenarioErrors(t *testing.T) {
	const tenant = `{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}`
	with := func(top string) string { return `{` + top + `"tenants": [` + tenant + `]}` }
	withTenant := func(fields string) string {
		return `{"tenants": [{"name": "a", "quota": 5, ` + fields + `}]}`
	}
	withArrival := func(a string) string {
		return `{"tenants": [{"name": "a", "quota": 5, "arrivals": [` + a + `]}]}`
	}
	tests := []struct {
		json, field, problem string
	}{
		{``, "", "empty"},
		{`{"nodes": 3,`, "", "truncated"},
		{`[1]`, "(top level)", "object"},
		{`{} {}`, "", "after the JSON object"},
		{`{"nodse": 3}`, "nodse", "unknown field"},
		{`{"nodes": "3"}`, "nodes", `want an integer or an array of nodes, got string "3"`},
		{`{"nodes": 1.5}`, "nodes", "want an integer or an array of nodes, got 1.5"},
		{`{"nodes": [{"shards": ["0-x"]}]}`, "nodes[0].shards[0]", `want a shard number or a range "lo-hi"`},
		{`{"nodes": [{"workers": 0}]}`, "nodes[0].workers", "want ≥ 1"},
		{`{"nodes": [{"shard": [1]}]}`, "nodes[0].shard", "unknown field"},
		{`{"changes": [{"quotas": {"a": 1}}]}`, "changes[0].at", "missing"},
		{`{"changes": [{"at": "1s", "quotas": {"a": "x"}}]}`, "changes[0].quotas.a", "want an integer"},
		{`{"nodes": 3, "nodes": 4}`, "nodes", "given twice"},
		{`{"tenants": 3}`, "tenants", "want an array, got 3"},
		{`{"tenants": null}`, "tenants", "want an array, got null"},
		{`{"tenants": [3]}`, "tenants[0]", "want an object, got 3"},
		{`{"tenants": [{"name": "a", "quota": 1.5}]}`, "tenants[0].quota", "want an integer, got 1.5"},
		{`{"tenants": [` + tenant + `, {"name": "b", "quota": 5, "bogus": 1}]}`, "tenants[1].bogus", "unknown field"},
		{`{"tenants": [{"name": 7}]}`, "tenants[0].name", "want a string, got 7"},
		{`{"tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "steady", "perSecond": "fast"}]}]}`, "tenants[0].arrivals[0].perSecond", `want a number, got string "fast"`},
		{`{"tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3, "when": "1s"}]}]}`, "tenants[0].arrivals[0].when", "unknown field"},
		{`{"serviceTime": {"min": "1s", "mean": "2s"}}`, "serviceTime.mean", "unknown field"},
		{`{"serviceTime": "1s"}`, "serviceTime", `want an object, got string "1s"`},
		{with(`"nodes": 0,`), "nodes", "0 is out of range"},
		{with(`"shardCount": 0,`), "shardCount", "0 is out of range"},
		{with(`"batchSize": 0,`), "batchSize", "0 is out of range"},
		{with(`"tick": "",`), "tick", "not a duration"},
		{with(`"tick": "0s",`), "tick", "out of range"},
		{with(`"lease": "0s",`), "lease", "claimed again"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "queues": 0`), "tenants[0].queues", "0 is out of range"},
		{withArrival(`{"pattern": "burst", "rows": 0}`), "tenants[0].arrivals[0].rows", "0 is out of range"},
		{`{}`, "tenants", "missing"},
		{`{"tenants": []}`, "tenants", "at least one"},
		{with(`"nodes": -1,`), "nodes", "out of range"},
		{with(`"nodes": 65,`), "nodes", "out of range"},
		{with(`"shardCount": 8, "nodes": 9,`), "nodes", "nodes ≤ shardCount"},
		{with(`"shardCount": 5000,`), "shardCount", "out of range"},
		{with(`"batchSize": -2,`), "batchSize", "out of range"},
		{with(`"workersPerNode": -1,`), "workersPerNode", "negative"},
		{with(`"apportionment": "floor",`), "apportionment", `want "ceil" or "shares"`},
		{with(`"shardCount": 4, "nodes": [{"shards": [0, 1]}, {"shards": [2]}],`), "nodes", "shard 3 is owned by no node"},
		{with(`"shardCount": 4, "nodes": [{"shards": ["0-2"]}, {"shards": [2, 3]}],`), "nodes[1].shards", "also owned by nodes[0]"},
		{with(`"shardCount": 4, "nodes": [{"shards": ["0-3"]}, {}],`), "nodes[1].shards", "every node lists its shards or none"},
		{with(`"shardCount": 4, "nodes": [{"shards": [0, 1, 2, 4]}],`), "nodes[0].shards", "out of range"},
		{with(`"nodes": [{}, {"failAt": "0s"}],`), "nodes[1].failAt", "want a time > 0"},
		{with(`"nodes": [{}, {"joinAt": "soon"}],`), "nodes[1].joinAt", "not a duration"},
		{with(`"nodes": [{}, {"joinAt": "5s", "failAt": "5s"}],`), "nodes[1].failAt", "not after joinAt"},
		{with(`"nodes": [{"failAt": "5s"}, {"joinAt": "1s"}],`), "nodes", "at least one node there from the start"},
		{with(`"shardCount": 2, "nodes": [{"shards": [0]}, {"shards": [1], "failAt": "5s"}],`), "nodes[0].shards", "no shard map"},
		{with(`"membershipLease": "0s",`), "membershipLease", "want > 0"},
		{with(`"changes": [{"at": "1s", "quotas": {"nobody": 1}}],`), "changes[0].quotas.nobody", "no tenant"},
		{with(`"changes": [{"at": "1s", "weights": {"a": 0}}],`), "changes[0].weights.a", "out of range"},
		{with(`"changes": [{"at": "1s"}],`), "changes[0]", "changes nothing"},
		{with(`"changes": [{"at": "2s", "quotas": {"a": 1}}, {"at": "1s", "quotas": {"a": 2}}],`), "changes[1].at", "time order"},
		{with(`"tick": "fast",`), "tick", "not a duration"},
		{with(`"tick": "-1s",`), "tick", "out of range"},
		{with(`"duration": "-5s",`), "duration", "not positive"},
		{with(`"duration": "50ms",`), "duration", "shorter than one tick"},
		{with(`"tick": "1ms", "duration": "2h",`), "duration", "ticks"},
		{with(`"lease": "2s",`), "lease", "claimed again"},
		{with(`"serviceTime": {"min": "0s", "max": "1s"},`), "serviceTime.min", "not positive"},
		{with(`"serviceTime": {"min": "2s", "max": "1s"},`), "serviceTime.max", "below min"},
		{with(`"serviceTime": {},`), "serviceTime", "min"},
		{with(`"serviceTime": {"min": "soon"},`), "serviceTime.min", "not a duration"},
		{`{"tenants": [{"quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].name", "empty"},
		{`{"tenants": [{"name": "a b", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].name", "character"},
		{`{"tenants": [` + tenant + `,` + tenant + `]}`, "tenants[1].name", "unique"},
		{`{"tenants": [{"name": "a", "quota": -2, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].quota", "0 pauses"},
		{`{"tenants": [{"name": "a", "quota": 1, "weight": -1, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].weight", "out of range"},
		{`{"tenants": [{"name": "a", "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].quota", "missing"},
		{`{"tenants": [{"name": "a", "quota": -2, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`, "tenants[0].quota", "-1 for unlimited"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "queues": -3`), "tenants[0].queues", "out of range"},
		{withTenant(`"arrivals": []`), "tenants[0].arrivals", "at least one"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"perSecond": 5}`), "tenants[0].rate.burst", "missing"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"burst": 5}`), "tenants[0].rate.perSecond", "missing"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"perSecond": 0, "burst": 5}`), "tenants[0].rate.perSecond", "want a rate > 0"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"perSecond": -2, "burst": 5}`), "tenants[0].rate.perSecond", "want a rate > 0"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"perSecond": 2, "burst": 0}`), "tenants[0].rate.burst", "out of range"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": {"perSecond": 2, "burst": 1, "window": 3}`), "tenants[0].rate.window", "unknown field"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "rate": 5`), "tenants[0].rate", "want an object"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 5}]`), "tenants[0].priorities[0].fraction", "missing"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"fraction": 0.5}]`), "tenants[0].priorities[0].priority", "missing"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 0, "fraction": 0.5}]`), "tenants[0].priorities[0].priority", "not 0"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 1001, "fraction": 0.5}]`), "tenants[0].priorities[0].priority", "-1000..1000"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 5, "fraction": 0}]`), "tenants[0].priorities[0].fraction", "(0, 1]"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 5, "fraction": 0.5}, {"priority": 5, "fraction": 0.1}]`), "tenants[0].priorities[1].priority", "classes must differ"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "priorities": [{"priority": 5, "fraction": 0.7}, {"priority": -5, "fraction": 0.4}]`), "tenants[0].priorities", "add up to"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "pendingCap": 0`), "tenants[0].pendingCap", "-1 for no cap"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "pendingCap": -2`), "tenants[0].pendingCap", "out of range"},
		{with(`"pendingCap": 0,`), "pendingCap", "leave it out for no cap"},
		{with(`"pendingCap": -3,`), "pendingCap", "out of range"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "serviceTime": {"min": "-1s"}`), "tenants[0].serviceTime.min", "not positive"},
		{withTenant(`"arrivals": [{"pattern": "burst", "rows": 3}], "serviceTime": {"min": "1h"}`), "lease", "claimed again"},
		{withArrival(`{"rows": 3}`), "tenants[0].arrivals[0].pattern", "missing"},
		{withArrival(`{"pattern": "poisson"}`), "tenants[0].arrivals[0].pattern", `"poisson"`},
		{withArrival(`{"pattern": "burst"}`), "tenants[0].arrivals[0].rows", "out of range"},
		{withArrival(`{"pattern": "burst", "rows": 3, "at": "90s"}`), "tenants[0].arrivals[0].at", "outside"},
		{withArrival(`{"pattern": "burst", "rows": 3, "perSecond": 2}`), "tenants[0].arrivals[0]", "only"},
		{withArrival(`{"pattern": "burst", "rows": 2000000}`), "tenants[0].arrivals[0].rows", "out of range"},
		{withArrival(`{"pattern": "steady"}`), "tenants[0].arrivals[0].perSecond", "rate > 0"},
		{withArrival(`{"pattern": "steady", "perSecond": -1}`), "tenants[0].arrivals[0].perSecond", "rate > 0"},
		{withArrival(`{"pattern": "steady", "perSecond": 1, "from": "61s"}`), "tenants[0].arrivals[0].from", "outside"},
		{withArrival(`{"pattern": "steady", "perSecond": 1, "from": "10s", "until": "5s"}`), "tenants[0].arrivals[0].until", "after from"},
		{withArrival(`{"pattern": "steady", "perSecond": 1, "until": "2m"}`), "tenants[0].arrivals[0].until", "at most the duration"},
		{withArrival(`{"pattern": "steady", "perSecond": 1, "rows": 4}`), "tenants[0].arrivals[0]", "only"},
		{withArrival(`{"pattern": "steady", "perSecond": 100000}`), "tenants[0].arrivals[0].perSecond", "at most"},
		{withArrival(`{"pattern": "burst", "rows": 600000}, {"pattern": "burst", "rows": 600000}`), "tenants", "at most"},
	}
	for i, tt := range tests {
		_, err := ParseScenario([]byte(tt.json))
		var se *ScenarioError
		if !errors.As(err, &se) || !errors.Is(err, ErrScenario) {
			t.Errorf("step %d: ParseScenario(%s) = %v, want a *ScenarioError", i, tt.json, err)
			continue
		}
		if se.Field != tt.field || !strings.Contains(se.Problem, tt.problem) {
			t.Errorf("step %d: ParseScenario(%s) = %q (field %q), want field %q and a problem mentioning %q",
				i, tt.json, err, se.Field, tt.field, tt.problem)
		}
		if !strings.HasPrefix(err.Error(), "bpsim: scenario: "+tt.field) {
			t.Errorf("step %d: error %q does not start with the field %q", i, err, tt.field)
		}
	}
}

func TestLoadScenarioMissingFile(t *testing.T) {
	_, err := LoadScenario(t.TempDir() + "/nope.json")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadScenario(missing) = %v, want an os.ErrNotExist", err)
	}
}

// TestDecodeScenarioDoesNotValidate checks that DecodeScenario leaves
// validation to the caller, so that an override can rescue a file.
func TestDecodeScenarioDoesNotValidate(t *testing.T) {
	data := []byte(`{"duration": "50ms", "tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`)
	s, err := DecodeScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	if s.Validate() == nil {
		t.Fatal("a 50ms window of 100ms ticks validated")
	}
	s.Duration = 10 * time.Second
	if err := s.Validate(); err != nil {
		t.Errorf("after the override: %v", err)
	}
}

// TestParseScenarioExplicitWorkersZero checks that workersPerNode, whose 0
// means unlimited, keeps an explicit 0.
func TestParseScenarioExplicitWorkersZero(t *testing.T) {
	s, err := ParseScenario([]byte(`{"workersPerNode": 0, "tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`))
	if err != nil || s.WorkersPerNode != 0 {
		t.Errorf("workersPerNode 0: %v, %d", err, s.WorkersPerNode)
	}
}
