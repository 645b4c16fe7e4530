package sim

// ScenarioHelp documents the scenario file format, for bpsim -h.
const ScenarioHelp = `Scenario file (-scenario FILE), JSON. Durations are Go duration strings
("100ms", "2s", "1m30s"); every time is simulated. A field left out takes the
default scenario's value, except "workersPerNode" (left out: unlimited) and
"tenants" (required); a field given is taken as given, so "nodes": 0 is an
error, not the default. Unknown fields are errors. The sample file
cmd/bpsim/scenario.sample.json is the default scenario.

  {
    "nodes": 3,              dispatcher nodes, 1..64; shard s is owned by node s mod nodes;
                             or an array, one object per node:
                               [{"shards": [0], "workers": 10},
                                {"shards": ["1-7"]}, {"shards": ["8-63"], "workers": 80}]
                             "shards" (numbers or "lo-hi" ranges; every node or none,
                             together each shard exactly once), "workers" (≥ 1; left
                             out: workersPerNode),
                             "failAt": "15s" (the node crashes: it stops sweeping and
                             completing; its claimed rows come back when their leases
                             run out), "joinAt": "35s" (the node starts then, owning
                             nothing before). With a failAt or joinAt no node lists
                             shards: they follow rendezvous hashing over the members
                             (pgstore.AssignShards), applied with SetOwnedShards on
                             every node; at least one node is there throughout
    "membershipLease": "15s", with failAt: how long after a failure its shards move
                             (the others notice it gone); left out: 3/2 of "lease",
                             pgstore's default, so the failed node's claims run out
                             first. Shorter hands over shards whose rows are still
                             claimed: the new owners' headroom counts them
    "shardCount": 64,        virtual shards, 1..4096, ≥ nodes
    "batchSize": 10,         most rows one node claims per sweep, under every policy
    "workersPerNode": 40,    rows a node runs at once; it sweeps only when
                             min(workers, batchSize) are free, for that many rows
                             (the dispatcher's credit); 0 = unlimited
    "tick": "100ms",         simulated time per step; every node sweeps once a tick
    "duration": "60s",       arrival window; the run then goes on until all rows settle
    "lease": "5m",           claim lease; must exceed the longest service time
    "serviceTime": {"min": "1s", "max": "3s"},
                             time a worker runs a row: uniform in [min, max],
                             rounded up to whole ticks
    "apportionment": "ceil", how a node turns a quota into its ceiling: "ceil"
                             (⌈q × owned/shards⌉) or "shares" (tighter cluster-wide)
    "pendingCap": 1000,      optional: every tenant's cap on unfinished rows, 1..2^30
                             (a tenant's "pendingCap" overrides it); left out: none
    "changes": [             optional: quotas and weights changed at a simulated time,
                             applied with SetConfig on every node before that tick's
                             sweeps; in time order
      {"at": "20s", "quotas": {"bursty": 10}, "weights": {"quiet-1": 3}}
    ],
    "tenants": [             1..10000 tenants (namespaces)
      {
        "name": "bursty",    letters, digits, - _ . ; unique
        "quota": 50,         cluster-wide ceiling on claimed rows: ≥ 1, -1 = unlimited,
                             0 = paused (enforced by the backpressure policy only); the
                             run does not wait for a tenant paused at the end: it ends
                             when every other row is settled and reports the rest held
        "weight": 1,         share of each sweep against other tenants (default 1)
        "queues": 20,        task queues q00, q01, … (default 1), 1..1000
        "serviceTime": {…},  optional override of the scenario's service time
        "rate": {"perSecond": 20, "burst": 10},
                             optional cluster-wide rate limit: rows started per second
                             (> 0) and the most started at once (≥ 1); enforced by the
                             backpressure policy (its token buckets follow simulated
                             time); the report gives every policy's starts per second
        "priorities": [{"priority": 100, "fraction": 0.1}],
                             optional: each row draws a class, priority p (-1000..1000,
                             not 0) with probability fraction, else priority 0; higher
                             is claimed first inside a route, and changes no share
        "pendingCap": 200,   optional cap on the tenant's unfinished rows in the store
                             (≥ 1; -1 = none; left out: the scenario's "pendingCap");
                             the producer drops rows Enqueue refuses over it, and the
                             report counts them rejected
        "downstream": {"capacity": 24, "retryAfter": "1s", "rejectTime": "100ms",
                       "slowdown": 1, "changes": [{"at": "20s", "capacity": 12}]},
                             optional: the API the tenant's handlers call. It serves
                             "capacity" calls at once (1..100000; "changes" set new
                             values inside the window, in time order); a call beyond
                             it is answered 429 after "rejectTime" (left out: one
                             tick) with Retry-After "retryAfter" (0..outbox.MaxDelay;
                             left out: none given), and the handler returns
                             dispatch.Overloaded, so the row is snoozed; a served call
                             runs 1 + slowdown (0..10) × min(1, u) times its service
                             time, u the share of the capacity the last second's 429s
                             took. A scenario with a downstream runs the arms below
        "arrivals": [        one or more patterns:
          {"pattern": "burst", "rows": 2000, "at": "0s"},
                             rows at one instant, dealt over the queues in turn
          {"pattern": "steady", "perSecond": 1, "from": "0s", "until": "60s"}
                             a Poisson stream (from/until default to the window),
                             each row on a random queue
        ]
      }
    ],
    "arms": ["no-signals", "static", "oracle", "adaptive"],
    "adaptive": {"floor": 1, "increase": 1, "decrease": 0.9, "window": "6s", "holdClaims": false}
                             optional, with a downstream: the arms to compare, in
                             order (left out: all; -policies overrides): no-signals
                             (no downstream limit), static (the quotas as given),
                             oracle (a downstream tenant's quota = its capacity),
                             adaptive (dispatch.Options.Adaptive on)
                             "adaptive": the adaptive arm's controller
                             (dispatch.AdaptiveCeilings; left out or 0: its defaults)
  }

Example scenarios, one per feature, are in cmd/bpsim/scenarios/ (a node that
fails and one that joins: handoff.json; a rate limit across a hand-off:
rates.json; priorities: priority.json; a runaway producer: pendingcap.json;
downstreams that answer 429, capacity halving and recovering: downstream.json).

The arrivals and service times are drawn from -seed, once, and replayed
unchanged under every policy. At most 1,000,000 rows and 1,000,000 ticks in the
arrival window.
`
