package sim

import (
	"encoding/json"
	"strconv"
	"time"
)

// Report is everything a run measured: one [PolicyReport] per policy over
// the same workload. It is what the JSON file holds.
type Report struct {
	Scenario Scenario        `json:"scenario"`
	Seed     int64           `json:"seed"`
	Database string          `json:"database"` // "sqlite" or "postgres"
	Rows     int             `json:"rows"`     // rows in the workload
	Policies []*PolicyReport `json:"policies"`
	Files    []string        `json:"-"` // files written into the output directory
}

// ExactlyOnce reports whether exactly-once held under every policy.
func (r *Report) ExactlyOnce() bool {
	for _, p := range r.Policies {
		if !p.Audit.OK() {
			return false
		}
	}
	return true
}

// Policy returns the report of policy p, or nil.
func (r *Report) Policy(p Policy) *PolicyReport {
	for _, pr := range r.Policies {
		if pr.Policy == p {
			return pr
		}
	}
	return nil
}

// PolicyReport is one policy's run. Times are simulated.
type PolicyReport struct {
	Policy      Policy
	Description string
	// Database names what the policy ran on when something of it outlives
	// the run: "" for SQLite's temporary files, which are removed;
	// PostgreSQL's database, with the schema that was dropped.
	Database string
	Tenants  []TenantReport

	Ticks      int           // ticks until the last row settled
	Settled    int           // rows settled (settles the store accepted)
	Makespan   time.Duration // from the first arrival to the last settle
	Throughput float64       // rows settled per simulated second over Makespan

	// Fairness is Jain's fairness index, averaged over the FairnessTicks
	// ticks in which at least two tenants were entitled to rows and at
	// least one held some, of x = min(1, in-flight ÷ entitlement) per such
	// tenant, the entitlement being its weighted max-min fair share of the
	// cluster's workers capped by min(quota, in-flight + waiting) (see
	// entitlement.jain): 1 when every tenant holds what its demand, quota
	// and weight entitle it to. With no such tick there is no index:
	// FairnessTicks is 0 and the report says "n/a".
	Fairness      float64
	FairnessTicks int

	// GaveUp says the run stopped before every row was settled, because
	// its claims kept outliving their lease: no settle succeeded for
	// longer than a lease plus the longest service time while rows ran.
	// Only a scenario whose lease is shorter than its service times does
	// that; the audit then reports the rows run twice and left unsettled.
	GaveUp bool

	// Events lists, in time order, the nodes that failed and the shards
	// that moved ("12s node-2 fails", "15s node-0 owns 21 → 32 shards").
	Events []string

	Timeline Timeline
	// Starts is, when the scenario has rates, each tenant's rows started
	// in the second up to each tick (a sliding window), sampled as
	// Timeline is; empty otherwise. The starts chart draws it.
	Starts Timeline
	// startsPerTick is, per rate-limited tenant, its starts in every tick
	// (nil for the others): what the tests check the bound over.
	startsPerTick [][]int
	Audit         Audit
	Wall          time.Duration // wall-clock time of the run
}

// TenantReport is one tenant's figures under one policy.
type TenantReport struct {
	Name    string
	Quota   int // cluster-wide quota at the start, or -1 for unlimited
	Weight  int // weight at the start
	Queues  int
	Rows    int // rows the tenant enqueued
	Claimed int // claims of its rows

	// WaitP50, WaitP99 and WaitMax are the nearest-rank percentiles of the
	// time from enqueue to claim, as the database recorded them.
	WaitP50, WaitP99, WaitMax time.Duration

	// PeakInflight is the most rows of the tenant claimed and not yet
	// settled at once, cluster-wide.
	PeakInflight int

	// ClusterCeiling is Σ over nodes of ⌈quota × owned/shardCount⌉: what
	// backpressure lets the tenant hold cluster-wide. Each node rounds up,
	// so it is between the quota and quota + nodes − 1.
	ClusterCeiling int

	// PeakCeiling is the sum of the current owners' ceilings at the first
	// tick of PeakInflight: the bound that peak was measured against when
	// quotas or ownership change during the run.
	PeakCeiling int

	// OverOwnersCeiling is the most rows in flight above the sum of the
	// current owners' ceilings, at any tick (0: never above). Rows claimed
	// before a quota was cut stay above it while they finish; under
	// backpressure nothing else takes a tenant there. OverAtClaim is the
	// same over the ticks in which some of the tenant's rows were claimed.
	OverOwnersCeiling int
	OverAtClaim       int

	// OverNodeCeiling counts backpressure sweeps after which the node that
	// swept held more of the tenant's rows claimed on its shards, whoever
	// claimed them, than its ceiling: 0 is the planner's promise, across
	// a hand-off too (0 under the other policies, which are not checked).
	OverNodeCeiling int

	// HeldAtCeiling counts the tenant's rows that a backpressure sweep left
	// pending at least once because the tenant was at its ceiling on the
	// node that owns the row's shard: rows that waited for the quota, not
	// for the batch. SweepsAtCeiling counts the sweeps that held the tenant
	// at a ceiling, and HeldRowSweeps sums those sweeps' held counts (a row
	// held by three sweeps counts three times; a lower bound, since a sweep
	// counts each queue's rows only as deep as its plan can use: see
	// backpressure.NamespaceReport.Capped). All are 0 under the other
	// policies.
	HeldAtCeiling   int
	SweepsAtCeiling int
	HeldRowSweeps   int

	// Paused says the tenant's quota is 0 once every change is applied:
	// the run did not wait for its rows. HeldAtEnd is the tenant's rows
	// never claimed when the run ended (0 for a tenant not paused).
	Paused    bool
	HeldAtEnd int

	// StarvedSweeps is the longest run of consecutive sweep rounds (ticks
	// in which some node swept) that claimed none of the tenant's rows
	// while it was backlogged: rows waiting, and fewer in flight than its
	// quota in force. A tenant held at its quota is not starved, it is
	// capped. StarvedMax is the same in simulated time.
	StarvedSweeps int
	StarvedMax    time.Duration

	// SweepsAtRate counts backpressure sweeps that held the tenant's rows
	// for its rate (backpressure.HeldRate): rows waiting for tokens, not
	// for a concurrency slot. 0 under the other policies.
	SweepsAtRate int

	// Starts is the tenant's starts per second against its rate: set for
	// every tenant when some tenant of the scenario has a rate, else nil.
	Starts *StartsReport

	// ByPriority is the tenant's waits per priority class, highest first,
	// when the tenant marks rows with priorities (Tenant.Priorities).
	ByPriority []PriorityWait

	// PendingCap is the tenant's cap on unfinished rows in the store (0:
	// none). Rejected is the rows the store refused to enqueue over it
	// (Rows counts them: Rows − Rejected were enqueued). PeakUnfinished,
	// when some tenant has a cap, is the most rows of the tenant enqueued
	// and not yet settled, after any tick's enqueues: ≤ PendingCap.
	PendingCap     int
	Rejected       int
	PeakUnfinished int

	// Snoozed counts the tenant's calls its downstream answered 429, whose
	// rows the dispatcher snoozed (each claimed again after the
	// Retry-After). Downstream is its downstream's figures, nil without
	// one.
	Snoozed    int
	Downstream *DownstreamReport
}

// Timeline is in-flight rows per tenant over time: rows claimed and not yet
// settled, cluster-wide, after each tick's sweeps. A long run keeps at most
// 4000 samples per tenant; each sample is then the peak over Tick, a power
// of two of the scenario's ticks.
type Timeline struct {
	Tick     time.Duration // simulated time each sample covers
	Inflight [][]int       // [tenant][sample]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MarshalJSON writes durations as milliseconds.
func (p *PolicyReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Policy       Policy           `json:"policy"`
		Description  string           `json:"description"`
		Database     string           `json:"database,omitempty"`
		Tenants      []TenantReport   `json:"tenants"`
		Events       []string         `json:"events,omitempty"`
		Ticks        int              `json:"ticks"`
		Settled      int              `json:"settled"`
		GaveUp       bool             `json:"gaveUp,omitempty"`
		MakespanMs   float64          `json:"makespanMs"`
		Throughput   float64          `json:"throughputPerSecond"`
		Fairness     *float64         `json:"jainFairness"` // null: n/a
		ExactlyOnce  bool             `json:"exactlyOnce"`
		Audit        Audit            `json:"audit"`
		WallMs       float64          `json:"wallMs"`
		TickMs       float64          `json:"timelineTickMs"`
		InflightByTn map[string][]int `json:"inflightTimeline"`
	}{
		p.Policy, p.Description, p.Database, p.Tenants, p.Events, p.Ticks, p.Settled, p.GaveUp, ms(p.Makespan),
		round3(p.Throughput), p.fairnessJSON(), p.Audit.OK(), p.Audit, ms(p.Wall), ms(p.Timeline.Tick),
		p.inflightByName(),
	})
}

// fairnessJSON is the index rounded to 3 places, or nil when there is none.
func (p *PolicyReport) fairnessJSON() *float64 {
	if p.FairnessTicks == 0 {
		return nil
	}
	f := round3(p.Fairness)
	return &f
}

func (p *PolicyReport) inflightByName() map[string][]int {
	m := make(map[string][]int, len(p.Tenants))
	for i, t := range p.Tenants {
		if i < len(p.Timeline.Inflight) {
			m[t.Name] = p.Timeline.Inflight[i]
		}
	}
	return m
}

// MarshalJSON writes durations as milliseconds.
func (t TenantReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name            string  `json:"name"`
		Quota           int     `json:"quota"`
		Weight          int     `json:"weight"`
		Queues          int     `json:"queues"`
		Rows            int     `json:"rows"`
		Claimed         int     `json:"claimed"`
		WaitP50Ms       float64 `json:"waitP50Ms"`
		WaitP99Ms       float64 `json:"waitP99Ms"`
		WaitMaxMs       float64 `json:"waitMaxMs"`
		PeakInflight    int     `json:"peakInflight"`
		ClusterCeiling  int     `json:"clusterCeiling"`
		PeakCeiling     int     `json:"peakCeiling"`
		OverOwners      int     `json:"overOwnersCeiling"`
		OverAtClaim     int     `json:"overAtClaim"`
		OverNode        int     `json:"overNodeCeiling"`
		HeldAtCeiling   int     `json:"heldAtCeiling"`
		SweepsAtCeiling int     `json:"sweepsAtCeiling"`
		HeldRowSweeps   int     `json:"heldRowSweeps"`
		Paused          bool    `json:"paused,omitempty"`
		HeldAtEnd       int     `json:"heldAtEnd"`
		StarvedSweeps   int     `json:"longestStarvedSweeps"`
		StarvedMaxMs    float64 `json:"longestStarvedMs"`
		SweepsAtRate    int     `json:"sweepsAtRate,omitempty"`
		Starts          any     `json:"starts,omitempty"`
		ByPriority      any     `json:"byPriority,omitempty"`
		PendingCap      int     `json:"pendingCap,omitempty"`
		Rejected        int     `json:"rejected,omitempty"`
		PeakUnfinished  int     `json:"peakUnfinished,omitempty"`
		Snoozed         int     `json:"snoozed,omitempty"`
		Downstream      any     `json:"downstream,omitempty"`
	}{t.Name, t.Quota, t.Weight, t.Queues, t.Rows, t.Claimed, ms(t.WaitP50), ms(t.WaitP99), ms(t.WaitMax),
		t.PeakInflight, t.ClusterCeiling, t.PeakCeiling, t.OverOwnersCeiling, t.OverAtClaim, t.OverNodeCeiling, t.HeldAtCeiling, t.SweepsAtCeiling, t.HeldRowSweeps,
		t.Paused, t.HeldAtEnd, t.StarvedSweeps, ms(t.StarvedMax),
		t.SweepsAtRate, startsJSON(t.Starts), priorityJSONs(t.ByPriority), t.PendingCap, t.Rejected, t.PeakUnfinished,
		t.Snoozed, downstreamJSONOf(t.Downstream)})
}

// startsJSON is s as report.json writes it (nil when s is).
func startsJSON(s *StartsReport) any {
	if s == nil {
		return nil
	}
	type window struct {
		FromMs  float64 `json:"fromMs"`
		SpanMs  float64 `json:"spanMs"`
		Started int     `json:"started"`
		Bound   float64 `json:"bound"`
		Held    bool    `json:"held"`
	}
	j := struct {
		RatePerSecond float64 `json:"ratePerSecond,omitempty"`
		Burst         int     `json:"burst,omitempty"`
		MaxPerSecond  float64 `json:"maxPerSecond1s"`
		MeanPerSecond float64 `json:"meanPerSecond"`
		Worst         *window `json:"worstWindow,omitempty"`
	}{s.Rate.PerSecond, s.Rate.Burst, round3(s.MaxPerSecond), round3(s.MeanPerSecond), nil}
	if w := s.Worst; w != nil {
		j.Worst = &window{ms(w.From), ms(w.Span), w.Started, round3(w.Bound), w.Held()}
	}
	return j
}

// priorityJSONs is ps as report.json writes them (nil when empty).
func priorityJSONs(ps []PriorityWait) any {
	if len(ps) == 0 {
		return nil
	}
	type class struct {
		Priority  int     `json:"priority"`
		Rows      int     `json:"rows"`
		Claimed   int     `json:"claimed"`
		WaitP50Ms float64 `json:"waitP50Ms"`
		WaitP99Ms float64 `json:"waitP99Ms"`
		WaitMaxMs float64 `json:"waitMaxMs"`
	}
	out := make([]class, len(ps))
	for i, p := range ps {
		out[i] = class{p.Priority, p.Rows, p.Claimed, ms(p.WaitP50), ms(p.WaitP99), ms(p.WaitMax)}
	}
	return out
}

// downstreamJSONOf is r for report.json (nil when r is).
func downstreamJSONOf(r *DownstreamReport) any {
	if r == nil {
		return nil
	}
	return r
}

func round3(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 3, 64), 64)
	return v
}
