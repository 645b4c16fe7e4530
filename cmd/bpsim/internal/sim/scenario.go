package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/limits"
	"github.com/outboxkit/backpressure/outbox"
)

// Limits on a scenario, so that a typo cannot ask for a run that never ends.
const (
	maxNodes      = 64
	maxShardCount = 4096
	maxBatchSize  = 10_000
	maxTenants    = 10_000
	maxQueues     = 1000
	maxRows       = 1_000_000 // rows over all tenants and arrivals
	maxTicks      = 1_000_000 // ticks in the arrival window
)

// ErrScenario matches every *[ScenarioError].
var ErrScenario = errors.New("bpsim: invalid scenario")

// ScenarioError names the scenario field that is wrong and says why. It
// matches [ErrScenario].
type ScenarioError struct {
	Field   string // JSON path, e.g. "tenants[1].arrivals[0].perSecond"
	Problem string
}

// Error returns "bpsim: scenario: FIELD: PROBLEM".
func (e *ScenarioError) Error() string {
	if e.Field == "" {
		return "bpsim: scenario: " + e.Problem
	}
	return "bpsim: scenario: " + e.Field + ": " + e.Problem
}

// Is reports whether target is [ErrScenario].
func (e *ScenarioError) Is(target error) bool { return target == ErrScenario }

// Scenario is a simulated cluster and its workload. Read one from JSON with
// [ParseScenario] or start from [DefaultScenario]; [Scenario.Validate]
// checks it. Durations are simulated time.
type Scenario struct {
	// Nodes is the number of dispatcher nodes. Unless NodeList says
	// otherwise, the shards are dealt out to them in turn (shard s goes to
	// node s mod Nodes), so they own disjoint sets that together cover
	// every shard. 1 ≤ Nodes ≤ min(64, ShardCount).
	Nodes int

	// NodeList, when not empty, describes each node (len(NodeList) =
	// Nodes): its shards, its workers, and when it fails or joins. Either
	// every node lists its shards, and together they partition
	// 0..ShardCount−1, or none does. When a node fails or joins, none may
	// list shards: ownership then follows the membership rule (see
	// MembershipLease).
	NodeList []NodeSpec

	// MembershipLease matters only when a node fails or joins. Shards are
	// then owned by rendezvous hashing (pgstore.AssignShards) over the
	// members: the nodes that have joined, and a failed node until
	// MembershipLease after its failure, when the others notice it is gone
	// and take its shards over. Every node applies a change of ownership
	// with SetOwnedShards before the sweeps of the tick it falls in. 0
	// means 3/2 of Lease, pgstore's default, under which a failed node's
	// claimed rows expire before its shards move; a shorter one hands them
	// over while those rows are still claimed, which the new owners'
	// headroom counts (claimed counts are per shard).
	MembershipLease time.Duration

	// Apportionment is how a node turns a quota into its ceiling:
	// "ceil" (the default, ⌈q × owned/shards⌉) or "shares"
	// (backpressure.ApportionShares).
	Apportionment string

	// Changes are configuration changes at given simulated times, applied
	// with Backpressure.SetConfig on every node before the sweeps of the
	// tick they fall in, in order. The other policies ignore them for
	// claiming, but the report measures every policy against the quotas
	// and weights in force.
	Changes []Change

	// ShardCount is the size of the virtual shard space, 1..4096.
	ShardCount int

	// BatchSize is the most rows one sweep of one node claims, under every
	// policy (backpressure's Config.BatchSize). 1..10000.
	BatchSize int

	// WorkersPerNode is how many claimed rows one node runs at once, unless
	// its NodeSpec says otherwise. A node sweeps only when
	// min(workers, BatchSize) workers are free, and then asks for that
	// many rows, under every policy, so it never claims a row it cannot
	// start (the dispatcher's credit). 0 means unlimited.
	WorkersPerNode int

	// Tick is the simulated time one step of the run stands for: in each
	// tick every node sweeps once. Waits are multiples of it.
	Tick time.Duration

	// Duration is the arrival window: arrivals happen in [0, Duration).
	// After it the run goes on until every row is settled.
	Duration time.Duration

	// Lease is the stores' lease. It must exceed the longest service time
	// plus one tick, so that no running row is ever claimed a second time.
	Lease time.Duration

	// ServiceTime is how long a worker runs a row, unless its tenant says
	// otherwise.
	ServiceTime ServiceTime

	// PendingCap is the stores' default cap on a tenant's unfinished rows
	// (outbox.PendingCaps.Default): 0 for none, else 1..outbox.MaxPendingCap.
	// A tenant's own PendingCap overrides it.
	PendingCap int

	// Tenants are the namespaces that enqueue rows; at least one.
	Tenants []Tenant

	// Arms are the arms a run of a scenario with a downstream compares
	// (see [Downstream]), in order, when the run names no policies: each
	// one of [DownstreamArms]. Left out: every arm. A scenario without a downstream
	// takes none.
	Arms []Policy

	// Adaptive is the adaptive arm's controller (the zero value:
	// dispatch's defaults).
	Adaptive AdaptiveSpec
}

// pendingCaps is the scenario's caps as the stores take them.
func (s Scenario) pendingCaps() outbox.PendingCaps {
	c := outbox.PendingCaps{Default: s.PendingCap}
	for _, t := range s.Tenants {
		if t.PendingCap != 0 {
			if c.PerNamespace == nil {
				c.PerNamespace = map[string]int{}
			}
			c.PerNamespace[t.Name] = max(t.PendingCap, 0) // -1: none
		}
	}
	return c
}

// pendingCap returns tenant i's cap in force, 0 for none.
func (s Scenario) pendingCap(i int) int {
	switch c := s.Tenants[i].PendingCap; {
	case c > 0:
		return c
	case c < 0:
		return 0
	}
	return s.PendingCap
}

// hasRates reports whether some tenant has a rate limit.
func (s Scenario) hasRates() bool {
	return slices.ContainsFunc(s.Tenants, func(t Tenant) bool { return t.Rate.PerSecond > 0 })
}

// hasPendingCaps reports whether some tenant's rows are capped.
func (s Scenario) hasPendingCaps() bool {
	for i := range s.Tenants {
		if s.pendingCap(i) > 0 {
			return true
		}
	}
	return false
}

// NodeSpec is one node of [Scenario.NodeList].
type NodeSpec struct {
	// Shards are the shards the node owns; nil when the shards are dealt
	// out in turn.
	Shards []int
	// Workers is the node's worker count: ≥ 1, or 0 for the scenario's
	// WorkersPerNode.
	Workers int
	// FailAt, when > 0, is when the node crashes: from then on it neither
	// sweeps nor completes, and the rows it had claimed come back only when
	// their leases run out. 0: it never fails.
	FailAt time.Duration
	// JoinAt, when > 0, is when the node starts: before it, it is no
	// member, owns no shard and does not sweep. 0: from the start.
	JoinAt time.Duration
}

// dynamic reports whether a node of s fails or joins, so that ownership
// follows the membership rule rather than a fixed map.
func (s Scenario) dynamic() bool {
	for _, n := range s.NodeList {
		if n.FailAt > 0 || n.JoinAt > 0 {
			return true
		}
	}
	return false
}

// membershipLease is MembershipLease with its default applied.
func (s Scenario) membershipLease() time.Duration {
	if s.MembershipLease > 0 {
		return s.MembershipLease
	}
	return s.Lease * 3 / 2
}

// Change is a configuration change at simulated time At: new quotas and
// weights for the tenants named (the others keep theirs).
type Change struct {
	At      time.Duration
	Quotas  map[string]int // ≥ 0 or -1
	Weights map[string]int // 1..limits.Weight
}

// ServiceTime is a uniform distribution of the time a worker runs one row,
// rounded up to whole ticks (at least one).
type ServiceTime struct {
	Min time.Duration // > 0
	Max time.Duration // ≥ Min
}

// Tenant is one namespace of the scenario.
type Tenant struct {
	// Name is the namespace: letters, digits, '-', '_' and '.', 1..64 bytes,
	// unique in the scenario.
	Name string

	// Quota is the tenant's cluster-wide ceiling on concurrently claimed
	// rows: ≥ 1, 0 to pause the tenant, or -1 ([backpressure.Unlimited])
	// for none. Only the backpressure policy enforces it; the others are
	// measured against it. The run does not wait for the rows of a tenant
	// paused at the end (after every Change): it ends when every other
	// row is settled, and reports the paused rows still held.
	Quota int

	// Weight is the tenant's weight (backpressure's Config.Weights):
	// 1..limits.Weight; 0 means 1.
	Weight int

	// Queues is the number of task queues (routes) the tenant's rows are
	// spread over, 1..1000. They are named "q00", "q01", …
	Queues int

	// ServiceTime overrides the scenario's service time when not nil.
	ServiceTime *ServiceTime

	// Arrivals is when the tenant's rows arrive: at least one pattern.
	Arrivals []Arrival

	// Rate is the tenant's cluster-wide rate limit (backpressure's
	// Config.Rates): rows started per simulated second, with a burst. The
	// zero value: none. Only the backpressure policy enforces it; the
	// report measures every policy's starts against it.
	Rate backpressure.Rate

	// Priorities marks a fraction of the tenant's rows with a priority
	// (outbox.Message.Priority): each row draws one class, Priority with
	// probability Fraction, and priority 0 with what is left. The draws
	// come from a stream of their own, so a scenario's arrivals and service
	// times are the same with or without priorities. Classes have distinct
	// priorities, none 0; fractions are in (0, 1] and sum to at most 1.
	Priorities []PriorityShare

	// PendingCap caps the tenant's unfinished rows in the store
	// (outbox.PendingCaps.PerNamespace): ≥ 1, -1 for no cap, 0 for the
	// scenario's PendingCap. The tenant's producer enqueues each tick's
	// rows in one call; when the store refuses it (outbox.ErrPendingCap),
	// it enqueues them one by one until one is refused and drops that one
	// and the rest of the tick's: those rows are "rejected", never in the
	// outbox, and the audit counts them apart from lost rows.
	PendingCap int

	// Downstream, when not nil, is the API the tenant's handlers call, with
	// a capacity beyond which it answers 429 (see [Downstream]). Only the
	// dispatcher arms model it ([DownstreamArms]).
	Downstream *Downstream
}

// PriorityShare is one priority class of [Tenant.Priorities].
type PriorityShare struct {
	Priority int     // outbox.MinPriority..outbox.MaxPriority, not 0
	Fraction float64 // of the tenant's rows, in (0, 1]
}

// The arrival patterns.
const (
	// PatternBurst enqueues Rows rows at once, at time At, dealt over the
	// tenant's queues in turn.
	PatternBurst = "burst"
	// PatternSteady enqueues rows as a Poisson process of rate PerSecond
	// from From until Until, each on a queue drawn at random.
	PatternSteady = "steady"
)

// Arrival is one arrival pattern of a tenant: [PatternBurst] or
// [PatternSteady]. The random draws come from the run's seed, so every
// policy sees the same arrivals.
type Arrival struct {
	Pattern string

	Rows int           // burst: rows, ≥ 1
	At   time.Duration // burst: when, in [0, Duration)

	PerSecond float64       // steady: mean rows per simulated second, > 0
	From      time.Duration // steady: start, in [0, Duration)
	Until     time.Duration // steady: end, in (From, Duration]; 0 means Duration
}

// DefaultScenario returns the noisy-neighbour scenario bpsim runs with no
// -scenario flag: 3 nodes over 64 shards; one bursty tenant with a backlog
// of 2000 rows over 20 task queues and quota 50; five quiet tenants with a
// steady trickle of one row a second on one queue each and quota 10.
func DefaultScenario() Scenario {
	s := Scenario{
		Nodes:          3,
		ShardCount:     64,
		BatchSize:      10,
		WorkersPerNode: 40,
		Tick:           100 * time.Millisecond,
		Duration:       60 * time.Second,
		Lease:          5 * time.Minute,
		Apportionment:  "ceil",
		ServiceTime:    ServiceTime{Min: 1 * time.Second, Max: 3 * time.Second},
		Tenants: []Tenant{{
			Name:     "bursty",
			Quota:    50,
			Weight:   1,
			Queues:   20,
			Arrivals: []Arrival{{Pattern: PatternBurst, Rows: 2000, At: 0}},
		}},
	}
	for i := 1; i <= 5; i++ {
		s.Tenants = append(s.Tenants, Tenant{
			Name:     fmt.Sprintf("quiet-%d", i),
			Quota:    10,
			Weight:   1,
			Queues:   1,
			Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 1}},
		})
	}
	return s
}

// scenarioJSON is the file format: durations are Go duration strings such
// as "100ms" or "1m30s". A nil field was left out of the file and takes its
// default; a field given, even as 0 or "", is taken as given, so that
// Validate rejects an explicit 0 rather than a default silently replacing
// it.
type scenarioJSON struct {
	Nodes           any              `json:"nodes"` // *int, or []nodeJSON
	MembershipLease *string          `json:"membershipLease,omitempty"`
	Apportionment   *string          `json:"apportionment,omitempty"`
	Changes         []changeJSON     `json:"changes,omitempty"`
	ShardCount      *int             `json:"shardCount"`
	BatchSize       *int             `json:"batchSize"`
	WorkersPerNode  *int             `json:"workersPerNode"`
	Tick            *string          `json:"tick"`
	Duration        *string          `json:"duration"`
	Lease           *string          `json:"lease"`
	ServiceTime     *serviceTimeJSON `json:"serviceTime"`
	PendingCap      *int             `json:"pendingCap,omitempty"`
	Tenants         []tenantJSON     `json:"tenants"`
	Arms            []string         `json:"arms,omitempty"`
	Adaptive        *adaptiveJSON    `json:"adaptive,omitempty"`
}

// nodeJSON is one node of "nodes" given as an array. Shards are numbers
// or "lo-hi" ranges; the JSON writer writes ranges where they are runs.
type nodeJSON struct {
	Shards  []any   `json:"shards,omitempty"`
	Workers *int    `json:"workers,omitempty"`
	FailAt  *string `json:"failAt,omitempty"`
	JoinAt  *string `json:"joinAt,omitempty"`
}

type changeJSON struct {
	At      *string        `json:"at"`
	Quotas  map[string]int `json:"quotas,omitempty"`
	Weights map[string]int `json:"weights,omitempty"`
}

type serviceTimeJSON struct {
	Min *string `json:"min,omitempty"`
	Max *string `json:"max,omitempty"`
}

type tenantJSON struct {
	Name        *string          `json:"name"`
	Quota       *int             `json:"quota"`
	Weight      *int             `json:"weight,omitempty"`
	Queues      *int             `json:"queues"`
	ServiceTime *serviceTimeJSON `json:"serviceTime,omitempty"`
	Arrivals    []arrivalJSON    `json:"arrivals"`
	Rate        *rateJSON        `json:"rate,omitempty"`
	Priorities  []priorityJSON   `json:"priorities,omitempty"`
	PendingCap  *int             `json:"pendingCap,omitempty"`
	Downstream  *downstreamJSON  `json:"downstream,omitempty"`
}

type rateJSON struct {
	PerSecond *float64 `json:"perSecond"`
	Burst     *int     `json:"burst"`
}

type priorityJSON struct {
	Priority *int     `json:"priority"`
	Fraction *float64 `json:"fraction"`
}

type arrivalJSON struct {
	Pattern   *string  `json:"pattern"`
	Rows      *int     `json:"rows,omitempty"`
	At        *string  `json:"at,omitempty"`
	PerSecond *float64 `json:"perSecond,omitempty"`
	From      *string  `json:"from,omitempty"`
	Until     *string  `json:"until,omitempty"`
}

// LoadScenario reads and validates the scenario file at path. A file that
// cannot be read gets the os error; a bad scenario a *[ScenarioError].
func LoadScenario(path string) (Scenario, error) {
	s, err := ReadScenario(path)
	if err != nil {
		return Scenario{}, err
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, err
	}
	return s, nil
}

// ReadScenario reads the scenario file at path like [LoadScenario], but
// does not validate it, so that the caller can override fields first (as
// bpsim's -duration does) and validate once.
func ReadScenario(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("bpsim: reading scenario: %w", err)
	}
	return DecodeScenario(b)
}

// ParseScenario decodes a JSON scenario with [DecodeScenario] and validates
// it.
func ParseScenario(data []byte) (Scenario, error) {
	s, err := DecodeScenario(data)
	if err != nil {
		return Scenario{}, err
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, err
	}
	return s, nil
}

// DecodeScenario decodes a JSON scenario (see [ScenarioHelp] for the
// format) without validating it. Unknown and repeated fields are errors,
// so a misspelt field does not silently fall back to a default. A field
// left out takes the value of [DefaultScenario], except workersPerNode
// (left out: 0, unlimited), a tenant's queues (left out: 1) and tenants and
// a tenant's quota, which must be given; a field given as 0 is kept, for
// [Scenario.Validate] to judge. Every error is a *[ScenarioError] naming
// the field by its full path, such as "tenants[0].quota".
func DecodeScenario(data []byte) (Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Scenario{}, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Scenario{}, &ScenarioError{Problem: "unexpected data after the JSON object"}
	}
	var j scenarioJSON
	var nodes *int
	var nodeList []NodeSpec
	var adaptive AdaptiveSpec
	if err := decodeObject(raw, "", map[string]func(json.RawMessage, string) error{
		"nodes": func(raw json.RawMessage, at string) error {
			if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
				return arrayField(func(raw json.RawMessage, at string) error {
					n, err := decodeNode(raw, at)
					nodeList = append(nodeList, n)
					return err
				}, func() { nodeList = []NodeSpec{} })(raw, at)
			}
			if err := intField(&nodes)(raw, at); err != nil {
				return &ScenarioError{Field: at, Problem: "want an integer or an array of nodes, got " + describe(raw)}
			}
			return nil
		},
		"membershipLease": stringField(&j.MembershipLease),
		"apportionment":   stringField(&j.Apportionment),
		"changes": arrayField(func(raw json.RawMessage, at string) error {
			c, err := decodeChange(raw, at)
			j.Changes = append(j.Changes, c)
			return err
		}, func() { j.Changes = []changeJSON{} }),
		"shardCount":     intField(&j.ShardCount),
		"batchSize":      intField(&j.BatchSize),
		"workersPerNode": intField(&j.WorkersPerNode),
		"tick":           stringField(&j.Tick),
		"duration":       stringField(&j.Duration),
		"lease":          stringField(&j.Lease),
		"serviceTime":    serviceTimeField(&j.ServiceTime),
		"pendingCap":     intField(&j.PendingCap),
		"tenants": arrayField(func(raw json.RawMessage, at string) error {
			t, err := decodeTenant(raw, at)
			j.Tenants = append(j.Tenants, t)
			return err
		}, func() { j.Tenants = []tenantJSON{} }),
		"arms": arrayField(func(raw json.RawMessage, at string) error {
			var a *string
			if err := stringField(&a)(raw, at); err != nil {
				return err
			}
			j.Arms = append(j.Arms, *a)
			return nil
		}, func() { j.Arms = []string{} }),
		"adaptive": decodeAdaptive(&adaptive),
	}); err != nil {
		return Scenario{}, err
	}
	s, err := j.scenario()
	if err != nil {
		return Scenario{}, err
	}
	s.Adaptive = adaptive
	switch {
	case nodeList != nil:
		s.Nodes, s.NodeList = len(nodeList), nodeList
	case nodes != nil:
		s.Nodes = *nodes
	}
	return s, nil
}

// decodeChange decodes one element of "changes".
func decodeChange(raw json.RawMessage, at string) (changeJSON, error) {
	var c changeJSON
	err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
		"at":      stringField(&c.At),
		"quotas":  intMapField(&c.Quotas),
		"weights": intMapField(&c.Weights),
	})
	return c, err
}

// decodeTenant decodes one element of "tenants".
func decodeTenant(raw json.RawMessage, at string) (tenantJSON, error) {
	var t tenantJSON
	err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
		"name":        stringField(&t.Name),
		"quota":       intField(&t.Quota),
		"weight":      intField(&t.Weight),
		"queues":      intField(&t.Queues),
		"serviceTime": serviceTimeField(&t.ServiceTime),
		"arrivals": arrayField(func(raw json.RawMessage, at string) error {
			a, err := decodeArrival(raw, at)
			t.Arrivals = append(t.Arrivals, a)
			return err
		}, func() { t.Arrivals = []arrivalJSON{} }),
		"rate": func(raw json.RawMessage, at string) error {
			var r rateJSON
			if err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
				"perSecond": floatField(&r.PerSecond),
				"burst":     intField(&r.Burst),
			}); err != nil {
				return err
			}
			t.Rate = &r
			return nil
		},
		"priorities": arrayField(func(raw json.RawMessage, at string) error {
			var p priorityJSON
			err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
				"priority": intField(&p.Priority),
				"fraction": floatField(&p.Fraction),
			})
			t.Priorities = append(t.Priorities, p)
			return err
		}, func() { t.Priorities = []priorityJSON{} }),
		"pendingCap": intField(&t.PendingCap),
		"downstream": func(raw json.RawMessage, at string) error {
			d, err := decodeDownstream(raw, at)
			t.Downstream = d
			return err
		},
	})
	return t, err
}

// decodeArrival decodes one element of a tenant's "arrivals".
func decodeArrival(raw json.RawMessage, at string) (arrivalJSON, error) {
	var a arrivalJSON
	err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
		"pattern":   stringField(&a.Pattern),
		"rows":      intField(&a.Rows),
		"at":        stringField(&a.At),
		"perSecond": floatField(&a.PerSecond),
		"from":      stringField(&a.From),
		"until":     stringField(&a.Until),
	})
	return a, err
}

// decodeNode decodes one element of "nodes" given as an array.
func decodeNode(raw json.RawMessage, at string) (NodeSpec, error) {
	var n NodeSpec
	var workers *int
	var failAt, joinAt *string
	err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
		"workers": intField(&workers),
		"failAt":  stringField(&failAt),
		"joinAt":  stringField(&joinAt),
		"shards": arrayField(func(raw json.RawMessage, at string) error {
			var v *int
			if intField(&v)(raw, at) == nil {
				n.Shards = append(n.Shards, *v)
				return nil
			}
			var r *string
			if stringField(&r)(raw, at) == nil {
				var lo, hi int
				if _, err := fmt.Sscanf(*r, "%d-%d", &lo, &hi); err == nil && lo <= hi && hi-lo < maxShardCount && fmt.Sprintf("%d-%d", lo, hi) == *r {
					for s := lo; s <= hi; s++ {
						n.Shards = append(n.Shards, s)
					}
					return nil
				}
			}
			return &ScenarioError{Field: at, Problem: `want a shard number or a range "lo-hi", got ` + describe(raw)}
		}, func() { n.Shards = []int{} }),
	})
	if err != nil {
		return n, err
	}
	if workers != nil {
		n.Workers = *workers
		if n.Workers == 0 {
			return n, &ScenarioError{Field: at + ".workers", Problem: "0: want ≥ 1, or leave it out for workersPerNode"}
		}
	}
	if n.FailAt, err = parseDuration(at+".failAt", failAt, 0); err != nil {
		return n, err
	}
	if failAt != nil && n.FailAt <= 0 {
		return n, &ScenarioError{Field: at + ".failAt", Problem: fmt.Sprintf("%v: want a time > 0, or leave it out for a node that never fails", n.FailAt)}
	}
	if n.JoinAt, err = parseDuration(at+".joinAt", joinAt, 0); err != nil {
		return n, err
	}
	if joinAt != nil && n.JoinAt <= 0 {
		return n, &ScenarioError{Field: at + ".joinAt", Problem: fmt.Sprintf("%v: want a time > 0, or leave it out for a node there from the start", n.JoinAt)}
	}
	return n, nil
}

// serviceTimeField decodes a {"min", "max"} object into *dst.
func serviceTimeField(dst **serviceTimeJSON) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var st serviceTimeJSON
		if err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
			"min": stringField(&st.Min),
			"max": stringField(&st.Max),
		}); err != nil {
			return err
		}
		*dst = &st
		return nil
	}
}

func (j scenarioJSON) scenario() (Scenario, error) {
	def := DefaultScenario()
	s := Scenario{
		Nodes:          def.Nodes,
		ShardCount:     orInt(j.ShardCount, def.ShardCount),
		BatchSize:      orInt(j.BatchSize, def.BatchSize),
		WorkersPerNode: orInt(j.WorkersPerNode, 0),
		ServiceTime:    def.ServiceTime,
		Apportionment:  def.Apportionment,
	}
	var err error
	if s.Tick, err = parseDuration("tick", j.Tick, def.Tick); err != nil {
		return Scenario{}, err
	}
	if s.Duration, err = parseDuration("duration", j.Duration, def.Duration); err != nil {
		return Scenario{}, err
	}
	if s.Lease, err = parseDuration("lease", j.Lease, def.Lease); err != nil {
		return Scenario{}, err
	}
	if j.ServiceTime != nil {
		if s.ServiceTime, err = j.ServiceTime.serviceTime("serviceTime"); err != nil {
			return Scenario{}, err
		}
	}
	if j.Apportionment != nil {
		s.Apportionment = *j.Apportionment
	}
	if j.PendingCap != nil {
		s.PendingCap = *j.PendingCap
		if s.PendingCap == 0 {
			return Scenario{}, &ScenarioError{Field: "pendingCap", Problem: "0: want ≥ 1, or leave it out for no cap"}
		}
	}
	if s.MembershipLease, err = parseDuration("membershipLease", j.MembershipLease, 0); err != nil {
		return Scenario{}, err
	}
	if j.MembershipLease != nil && s.MembershipLease <= 0 {
		return Scenario{}, &ScenarioError{Field: "membershipLease", Problem: fmt.Sprintf("%v: want > 0, or leave it out for 3/2 of the lease", s.MembershipLease)}
	}
	for i, cj := range j.Changes {
		at := fmt.Sprintf("changes[%d]", i)
		if cj.At == nil {
			return Scenario{}, &ScenarioError{Field: at + ".at", Problem: "missing: want the simulated time of the change"}
		}
		d, err := parseDuration(at+".at", cj.At, 0)
		if err != nil {
			return Scenario{}, err
		}
		s.Changes = append(s.Changes, Change{At: d, Quotas: cj.Quotas, Weights: cj.Weights})
	}
	if j.Tenants == nil {
		return Scenario{}, &ScenarioError{Field: "tenants", Problem: "missing: want at least one tenant"}
	}
	for i, tj := range j.Tenants {
		t, err := tj.tenant(fmt.Sprintf("tenants[%d]", i))
		if err != nil {
			return Scenario{}, err
		}
		s.Tenants = append(s.Tenants, t)
	}
	for _, a := range j.Arms {
		s.Arms = append(s.Arms, Policy(a))
	}
	if j.Arms != nil && s.Arms == nil {
		s.Arms = []Policy{}
	}
	return s, nil
}

// tenant is the Tenant tj describes, at its path at.
func (tj tenantJSON) tenant(at string) (Tenant, error) {
	t := Tenant{Queues: orInt(tj.Queues, 1)}
	if tj.Name != nil {
		t.Name = *tj.Name
	}
	if tj.Quota == nil {
		return Tenant{}, &ScenarioError{Field: at + ".quota", Problem: "missing: want ≥ 1, or -1 for unlimited"}
	}
	t.Quota = *tj.Quota
	t.Weight = orInt(tj.Weight, 0)
	if tj.ServiceTime != nil {
		st, err := tj.ServiceTime.serviceTime(at + ".serviceTime")
		if err != nil {
			return Tenant{}, err
		}
		t.ServiceTime = &st
	}
	for k, aj := range tj.Arrivals {
		a, err := aj.arrival(fmt.Sprintf("%s.arrivals[%d]", at, k))
		if err != nil {
			return Tenant{}, err
		}
		t.Arrivals = append(t.Arrivals, a)
	}
	if tj.Rate != nil {
		if tj.Rate.PerSecond == nil {
			return Tenant{}, &ScenarioError{Field: at + ".rate.perSecond", Problem: "missing: want the rows started per second, > 0"}
		}
		if tj.Rate.Burst == nil {
			return Tenant{}, &ScenarioError{Field: at + ".rate.burst", Problem: "missing: want the most rows started at once, ≥ 1"}
		}
		t.Rate = backpressure.Rate{PerSecond: *tj.Rate.PerSecond, Burst: *tj.Rate.Burst}
		if t.Rate.PerSecond == 0 {
			return Tenant{}, &ScenarioError{Field: at + ".rate.perSecond", Problem: "0: want a rate > 0, or leave \"rate\" out for none"}
		}
	}
	for k, pj := range tj.Priorities {
		pat := fmt.Sprintf("%s.priorities[%d]", at, k)
		if pj.Priority == nil {
			return Tenant{}, &ScenarioError{Field: pat + ".priority", Problem: fmt.Sprintf("missing: want a priority in %d..%d, not 0", outbox.MinPriority, outbox.MaxPriority)}
		}
		if pj.Fraction == nil {
			return Tenant{}, &ScenarioError{Field: pat + ".fraction", Problem: "missing: want the fraction of the tenant's rows, in (0, 1]"}
		}
		t.Priorities = append(t.Priorities, PriorityShare{Priority: *pj.Priority, Fraction: *pj.Fraction})
	}
	if tj.PendingCap != nil {
		t.PendingCap = *tj.PendingCap
		if t.PendingCap == 0 {
			return Tenant{}, &ScenarioError{Field: at + ".pendingCap", Problem: "0: want ≥ 1, or -1 for no cap; leave it out for the scenario's pendingCap"}
		}
	}
	if tj.Downstream != nil {
		d, err := tj.Downstream.downstream(at + ".downstream")
		if err != nil {
			return Tenant{}, err
		}
		t.Downstream = d
	}
	return t, nil
}

// arrival is the Arrival aj describes, at its path at.
func (aj arrivalJSON) arrival(at string) (Arrival, error) {
	a := Arrival{Rows: orInt(aj.Rows, 0)}
	if aj.Pattern != nil {
		a.Pattern = *aj.Pattern
	}
	if aj.PerSecond != nil {
		a.PerSecond = *aj.PerSecond
	}
	var err error
	if a.At, err = parseDuration(at+".at", aj.At, 0); err != nil {
		return Arrival{}, err
	}
	if a.From, err = parseDuration(at+".from", aj.From, 0); err != nil {
		return Arrival{}, err
	}
	if a.Until, err = parseDuration(at+".until", aj.Until, 0); err != nil {
		return Arrival{}, err
	}
	return a, nil
}

func (j serviceTimeJSON) serviceTime(field string) (ServiceTime, error) {
	if j.Min == nil && j.Max == nil {
		return ServiceTime{}, &ScenarioError{Field: field, Problem: `want "min" and "max" durations`}
	}
	// One of them alone means a fixed service time.
	if j.Min == nil {
		j.Min = j.Max
	}
	if j.Max == nil {
		j.Max = j.Min
	}
	min, err := parseDuration(field+".min", j.Min, 0)
	if err != nil {
		return ServiceTime{}, err
	}
	max, err := parseDuration(field+".max", j.Max, 0)
	if err != nil {
		return ServiceTime{}, err
	}
	return ServiceTime{Min: min, Max: max}, nil
}

// MarshalJSON writes the scenario in the file format [ParseScenario] reads.
func (s Scenario) MarshalJSON() ([]byte, error) {
	j := scenarioJSON{
		Nodes:          ptr(s.Nodes),
		Changes:        nil,
		ShardCount:     ptr(s.ShardCount),
		BatchSize:      ptr(s.BatchSize),
		WorkersPerNode: ptr(s.WorkersPerNode),
		Tick:           ptr(s.Tick.String()),
		Duration:       ptr(s.Duration.String()),
		Lease:          ptr(s.Lease.String()),
		ServiceTime:    &serviceTimeJSON{Min: ptr(s.ServiceTime.Min.String()), Max: ptr(s.ServiceTime.Max.String())},
		Tenants:        []tenantJSON{},
	}
	if s.NodeList != nil {
		nodes := make([]nodeJSON, len(s.NodeList))
		for i, n := range s.NodeList {
			nodes[i].Shards = shardRanges(n.Shards)
			if n.Workers != 0 {
				nodes[i].Workers = ptr(n.Workers)
			}
			if n.FailAt != 0 {
				nodes[i].FailAt = ptr(n.FailAt.String())
			}
			if n.JoinAt != 0 {
				nodes[i].JoinAt = ptr(n.JoinAt.String())
			}
		}
		j.Nodes = nodes
	}
	if s.Apportionment != "" {
		j.Apportionment = ptr(s.Apportionment)
	}
	if s.MembershipLease != 0 {
		j.MembershipLease = ptr(s.MembershipLease.String())
	}
	if s.PendingCap != 0 {
		j.PendingCap = ptr(s.PendingCap)
	}
	for _, c := range s.Changes {
		j.Changes = append(j.Changes, changeJSON{At: ptr(c.At.String()), Quotas: c.Quotas, Weights: c.Weights})
	}
	for _, t := range s.Tenants {
		tj := tenantJSON{Name: ptr(t.Name), Quota: ptr(t.Quota), Queues: ptr(t.Queues)}
		if t.Weight != 0 {
			tj.Weight = ptr(t.Weight)
		}
		if t.ServiceTime != nil {
			tj.ServiceTime = &serviceTimeJSON{Min: ptr(t.ServiceTime.Min.String()), Max: ptr(t.ServiceTime.Max.String())}
		}
		for _, a := range t.Arrivals {
			aj := arrivalJSON{Pattern: ptr(a.Pattern)}
			switch a.Pattern {
			case PatternBurst:
				aj.Rows, aj.At = ptr(a.Rows), ptr(a.At.String())
			case PatternSteady:
				aj.PerSecond, aj.From = ptr(a.PerSecond), ptr(a.From.String())
				if a.Until != 0 {
					aj.Until = ptr(a.Until.String())
				}
			}
			tj.Arrivals = append(tj.Arrivals, aj)
		}
		if t.Rate != (backpressure.Rate{}) {
			tj.Rate = &rateJSON{PerSecond: ptr(t.Rate.PerSecond), Burst: ptr(t.Rate.Burst)}
		}
		for _, p := range t.Priorities {
			tj.Priorities = append(tj.Priorities, priorityJSON{Priority: ptr(p.Priority), Fraction: ptr(p.Fraction)})
		}
		if t.PendingCap != 0 {
			tj.PendingCap = ptr(t.PendingCap)
		}
		tj.Downstream = t.Downstream.json()
		j.Tenants = append(j.Tenants, tj)
	}
	for _, a := range s.Arms {
		j.Arms = append(j.Arms, string(a))
	}
	j.Adaptive = s.Adaptive.json()
	return json.MarshalIndent(j, "", "  ")
}

// shardRanges writes shards as numbers, and runs of three or more as
// "lo-hi" ranges.
func shardRanges(shards []int) []any {
	if shards == nil {
		return nil
	}
	out := []any{}
	for i := 0; i < len(shards); {
		k := i
		for k+1 < len(shards) && shards[k+1] == shards[k]+1 {
			k++
		}
		if k-i >= 2 {
			out = append(out, fmt.Sprintf("%d-%d", shards[i], shards[k]))
		} else {
			for x := i; x <= k; x++ {
				out = append(out, shards[x])
			}
		}
		i = k + 1
	}
	return out
}

// Validate checks every field of s and returns a *[ScenarioError] for the
// first one that is wrong, in the order of the file format.
func (s Scenario) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Nodes < 1 || s.Nodes > maxNodes:
		return bad("nodes", "%d is out of range: want 1..%d", s.Nodes, maxNodes)
	case s.ShardCount < 1 || s.ShardCount > maxShardCount:
		return bad("shardCount", "%d is out of range: want 1..%d", s.ShardCount, maxShardCount)
	case s.Nodes > s.ShardCount:
		return bad("nodes", "%d nodes cannot each own one of %d shards: want nodes ≤ shardCount", s.Nodes, s.ShardCount)
	case s.BatchSize < 1 || s.BatchSize > maxBatchSize:
		return bad("batchSize", "%d is out of range: want 1..%d", s.BatchSize, maxBatchSize)
	case s.WorkersPerNode < 0:
		return bad("workersPerNode", "%d is negative: want 0 (unlimited) or ≥ batchSize", s.WorkersPerNode)
	case s.Apportionment != "" && s.Apportionment != "ceil" && s.Apportionment != "shares":
		return bad("apportionment", "%q: want \"ceil\" or \"shares\"", s.Apportionment)
	case s.Tick <= 0 || s.Tick > time.Hour:
		return bad("tick", "%v is out of range: want > 0 and ≤ 1h", s.Tick)
	case s.Duration <= 0:
		return bad("duration", "%v is not positive", s.Duration)
	case s.Duration < s.Tick:
		return bad("duration", "%v is shorter than one tick (%v)", s.Duration, s.Tick)
	case s.Duration/s.Tick > maxTicks:
		return bad("duration", "%v is %d ticks of %v: want at most %d", s.Duration, s.Duration/s.Tick, s.Tick, maxTicks)
	}
	if err := s.ServiceTime.validate("serviceTime"); err != nil {
		return err
	}
	if s.PendingCap < 0 || s.PendingCap > outbox.MaxPendingCap {
		return bad("pendingCap", "%d is out of range: want 1..%d (0 or left out: no cap)", s.PendingCap, outbox.MaxPendingCap)
	}
	if err := s.validateNodes(); err != nil {
		return err
	}
	seen, longest, err := s.validateTenants()
	if err != nil {
		return err
	}
	if err := s.validateChanges(seen); err != nil {
		return err
	}
	if err := s.validateDownstreams(); err != nil {
		return err
	}
	longest = max(longest, s.longestDownstreamCall())
	if s.Lease <= ceilTicks(longest, s.Tick)*s.Tick {
		return bad("lease", "%v is not longer than the longest service time %v rounded up to ticks of %v: a running row would be claimed again", s.Lease, longest, s.Tick)
	}
	return nil
}

// validateTenants checks the tenants, and returns each name's index and
// the longest service time of any.
func (s Scenario) validateTenants() (seen map[string]int, longest time.Duration, err error) {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if len(s.Tenants) == 0 {
		return nil, 0, bad("tenants", "empty: want at least one tenant")
	}
	if len(s.Tenants) > maxTenants {
		return nil, 0, bad("tenants", "%d tenants: want at most %d", len(s.Tenants), maxTenants)
	}
	longest = s.ServiceTime.Max
	seen = make(map[string]int, len(s.Tenants))
	rows := 0.0
	for i, t := range s.Tenants {
		at := fmt.Sprintf("tenants[%d]", i)
		if err := validName(t.Name); err != nil {
			return nil, 0, bad(at+".name", "%q: %v", t.Name, err)
		}
		if j, dup := seen[t.Name]; dup {
			return nil, 0, bad(at+".name", "%q is also the name of tenants[%d]: names must be unique", t.Name, j)
		}
		seen[t.Name] = i
		n, err := t.validate(at, s.Duration)
		if err != nil {
			return nil, 0, err
		}
		if t.ServiceTime != nil {
			longest = max(longest, t.ServiceTime.Max)
		}
		rows += n
	}
	if rows > maxRows {
		return nil, 0, bad("tenants", "the arrivals add up to about %.0f rows: want at most %d", rows, maxRows)
	}
	return seen, longest, nil
}

// validate checks tenant t, at path at, whose arrivals fall in the window
// [0, window), and returns about how many rows its arrivals draw.
func (t Tenant) validate(at string, window time.Duration) (float64, error) {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case t.Quota < 0 && t.Quota != backpressure.Unlimited:
		return 0, bad(at+".quota", "%d: want ≥ 0 (0 pauses), or -1 for unlimited", t.Quota)
	case t.Weight < 0 || t.Weight > limits.Weight:
		return 0, bad(at+".weight", "%d is out of range: want 1..%d (0 or left out: 1)", t.Weight, limits.Weight)
	case t.Queues < 1 || t.Queues > maxQueues:
		return 0, bad(at+".queues", "%d is out of range: want 1..%d", t.Queues, maxQueues)
	}
	if err := t.validateLimits(at); err != nil {
		return 0, err
	}
	if t.ServiceTime != nil {
		if err := t.ServiceTime.validate(at + ".serviceTime"); err != nil {
			return 0, err
		}
	}
	if len(t.Arrivals) == 0 {
		return 0, bad(at+".arrivals", "empty: want at least one arrival pattern")
	}
	rows := 0.0
	for k, a := range t.Arrivals {
		aat := fmt.Sprintf("%s.arrivals[%d]", at, k)
		n, err := a.validate(aat, window)
		if err != nil {
			return 0, err
		}
		rows += n
	}
	return rows, nil
}

// validateChanges checks the changes against the tenants' names, seen.
func (s Scenario) validateChanges(seen map[string]int) error {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	for i, c := range s.Changes {
		at := fmt.Sprintf("changes[%d]", i)
		if c.At < 0 || c.At/s.Tick > maxTicks {
			return bad(at+".at", "%v: want ≥ 0 and at most %d ticks", c.At, maxTicks)
		}
		if i > 0 && c.At < s.Changes[i-1].At {
			return bad(at+".at", "%v is before changes[%d] (%v): list changes in time order", c.At, i-1, s.Changes[i-1].At)
		}
		if len(c.Quotas) == 0 && len(c.Weights) == 0 {
			return bad(at, "changes nothing: want \"quotas\" or \"weights\"")
		}
		for _, name := range sortedKeys(c.Quotas) {
			q := c.Quotas[name]
			if _, ok := seen[name]; !ok {
				return bad(at+".quotas."+name, "no tenant has this name")
			}
			if q < 0 && q != backpressure.Unlimited {
				return bad(at+".quotas."+name, "%d: want ≥ 0 (0 pauses), or -1 for unlimited", q)
			}
		}
		for _, name := range sortedKeys(c.Weights) {
			w := c.Weights[name]
			if _, ok := seen[name]; !ok {
				return bad(at+".weights."+name, "no tenant has this name")
			}
			if w < 1 || w > limits.Weight {
				return bad(at+".weights."+name, "%d is out of range: want 1..%d", w, limits.Weight)
			}
		}
	}
	return nil
}

// validateNodes checks NodeList.
func (s Scenario) validateNodes() error {
	if len(s.NodeList) == 0 {
		return nil
	}
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if len(s.NodeList) != s.Nodes {
		return bad("nodes", "%d nodes listed for %d nodes", len(s.NodeList), s.Nodes)
	}
	listed := s.NodeList[0].Shards != nil
	if s.MembershipLease < 0 {
		return bad("membershipLease", "%v is negative", s.MembershipLease)
	}
	if s.dynamic() {
		survivor := false
		for i, n := range s.NodeList {
			at := fmt.Sprintf("nodes[%d]", i)
			switch {
			case n.Shards != nil:
				return bad(at+".shards", "a scenario in which a node fails or joins takes no shard map: the shards follow the membership (leave \"shards\" out)")
			case n.FailAt < 0 || n.FailAt/s.Tick > maxTicks:
				return bad(at+".failAt", "%v: want > 0 and at most %d ticks", n.FailAt, maxTicks)
			case n.JoinAt < 0 || n.JoinAt/s.Tick > maxTicks:
				return bad(at+".joinAt", "%v: want > 0 and at most %d ticks", n.JoinAt, maxTicks)
			case n.FailAt > 0 && n.FailAt/s.Tick <= n.JoinAt/s.Tick:
				return bad(at+".failAt", "%v is not after joinAt %v (in ticks of %v)", n.FailAt, n.JoinAt, s.Tick)
			}
			if n.FailAt == 0 && n.JoinAt == 0 {
				survivor = true
			}
		}
		if !survivor {
			return bad("nodes", "every node fails or joins later: want at least one node there from the start that never fails")
		}
	}
	owner := make([]int, s.ShardCount)
	for i := range owner {
		owner[i] = -1
	}
	for i, n := range s.NodeList {
		at := fmt.Sprintf("nodes[%d]", i)
		if n.Workers < 0 {
			return bad(at+".workers", "%d is negative", n.Workers)
		}
		if (n.Shards != nil) != listed {
			return bad(at+".shards", "either every node lists its shards or none does")
		}
		if listed && len(n.Shards) == 0 {
			return bad(at+".shards", "empty: a node must own at least one shard")
		}
		for _, sh := range n.Shards {
			switch {
			case sh < 0 || sh >= s.ShardCount:
				return bad(at+".shards", "shard %d is out of range 0..%d", sh, s.ShardCount-1)
			case owner[sh] >= 0:
				return bad(at+".shards", "shard %d is also owned by nodes[%d]", sh, owner[sh])
			}
			owner[sh] = i
		}
	}
	if listed {
		for sh, o := range owner {
			if o < 0 {
				return bad("nodes", "shard %d is owned by no node: its rows would never be claimed", sh)
			}
		}
	}
	return nil
}

// validateLimits checks the tenant's rate, priorities and pending cap.
func (t Tenant) validateLimits(at string) error {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: at + field, Problem: fmt.Sprintf(format, args...)}
	}
	r := t.Rate
	switch {
	case r == backpressure.Rate{}:
	case !(r.PerSecond > 0) || math.IsInf(r.PerSecond, 0) || r.PerSecond > limits.RatePerSecond:
		return bad(".rate.perSecond", "%v: want a rate > 0 and at most %g rows a second", r.PerSecond, float64(limits.RatePerSecond))
	case r.Burst < 1 || r.Burst > limits.Burst:
		return bad(".rate.burst", "%d is out of range: want 1..%d", r.Burst, limits.Burst)
	}
	sum := 0.0
	seen := map[int]int{}
	for k, p := range t.Priorities {
		pat := fmt.Sprintf(".priorities[%d]", k)
		switch {
		case p.Priority == 0 || p.Priority < outbox.MinPriority || p.Priority > outbox.MaxPriority:
			return bad(pat+".priority", "%d: want %d..%d, not 0 (the rows no class draws have priority 0)", p.Priority, outbox.MinPriority, outbox.MaxPriority)
		case !(p.Fraction > 0) || p.Fraction > 1:
			return bad(pat+".fraction", "%v: want a fraction in (0, 1]", p.Fraction)
		}
		if j, dup := seen[p.Priority]; dup {
			return bad(pat+".priority", "%d is also the priority of priorities[%d]: classes must differ", p.Priority, j)
		}
		seen[p.Priority] = k
		sum += p.Fraction
	}
	if sum > 1+1e-9 {
		return bad(".priorities", "the fractions add up to %v: want at most 1", sum)
	}
	if t.PendingCap < -1 || t.PendingCap > outbox.MaxPendingCap {
		return bad(".pendingCap", "%d is out of range: want 1..%d, or -1 for no cap (0 or left out: the scenario's pendingCap)", t.PendingCap, outbox.MaxPendingCap)
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (st ServiceTime) validate(field string) error {
	switch {
	case st.Min <= 0:
		return &ScenarioError{Field: field + ".min", Problem: fmt.Sprintf("%v is not positive", st.Min)}
	case st.Max < st.Min:
		return &ScenarioError{Field: field + ".max", Problem: fmt.Sprintf("%v is below min %v", st.Max, st.Min)}
	case st.Max > 24*time.Hour:
		return &ScenarioError{Field: field + ".max", Problem: fmt.Sprintf("%v is over 24h", st.Max)}
	}
	return nil
}

// validate checks one arrival pattern and returns about how many rows it
// brings.
func (a Arrival) validate(field string, window time.Duration) (float64, error) {
	bad := func(f, format string, args ...any) (float64, error) {
		return 0, &ScenarioError{Field: field + f, Problem: fmt.Sprintf(format, args...)}
	}
	switch a.Pattern {
	case PatternBurst:
		switch {
		case a.Rows < 1 || a.Rows > maxRows:
			return bad(".rows", "%d is out of range: want 1..%d", a.Rows, maxRows)
		case a.At < 0 || a.At >= window:
			return bad(".at", "%v is outside the arrival window [0, %v)", a.At, window)
		case a.PerSecond != 0 || a.From != 0 || a.Until != 0:
			return bad("", `a burst takes "rows" and "at" only`)
		}
		return float64(a.Rows), nil
	case PatternSteady:
		until := a.Until
		if until == 0 {
			until = window
		}
		switch {
		case !(a.PerSecond > 0) || math.IsInf(a.PerSecond, 0):
			return bad(".perSecond", "%v: want a rate > 0", a.PerSecond)
		case a.From < 0 || a.From >= window:
			return bad(".from", "%v is outside the arrival window [0, %v)", a.From, window)
		case until <= a.From || until > window:
			return bad(".until", "%v: want after from (%v) and at most the duration %v", until, a.From, window)
		case a.Rows != 0 || a.At != 0:
			return bad("", `a steady pattern takes "perSecond", "from" and "until" only`)
		}
		n := a.PerSecond * (until - a.From).Seconds()
		if n > maxRows {
			return bad(".perSecond", "%v a second for %v is about %.0f rows: want at most %d", a.PerSecond, until-a.From, n, maxRows)
		}
		return n, nil
	case "":
		return bad(".pattern", `missing: want "burst" or "steady"`)
	}
	return bad(".pattern", `%q: want "burst" or "steady"`, a.Pattern)
}

func validName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > 64 {
		return errors.New("longer than 64 bytes")
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("character %q: want letters, digits, '-', '_' and '.'", c)
		}
	}
	return nil
}
