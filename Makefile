# make test: gofmt, go vet, staticcheck and go test -race over every module
# in go.work, the README's outside-use recipe (.ci/outside), and every
# benchmark once. Tools are installed into ./bin at pinned versions.

GO          ?= go
BIN         := $(CURDIR)/bin
STATICCHECK := $(BIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
MODULES      = $(shell $(GO) list -m -f '{{.Dir}}')
# Every package of every module in go.work: the go command and staticcheck
# take them in one invocation, each loading the shared dependencies once.
PACKAGES     = github.com/outboxkit/backpressure/...
RAPID_CHECKS ?= 1000
# Cases of each property test of the stores (pgstore, sqlitestore: their
# own and the storetest suite's): each case is many statements against a
# database.
STORE_CHECKS ?= 25
FUZZTIME     ?= 60s
BENCHTIME    ?= 1s

.PHONY: test fmt-check vet staticcheck unit test-long outside install-check bench-smoke bench bench-drain bench-history bench-steady chaos failover fuzz tools chart clean browser test-browser

test: fmt-check vet staticcheck unit outside install-check bench-smoke

tools: $(STATICCHECK)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt-check:
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt -w needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PACKAGES)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PACKAGES)

# The root package's property tests run RAPID_CHECKS cases each, the
# stores' STORE_CHECKS (make test-long: rapid's default of 100). The
# admin pages' browser test (cmd/outboxctl) needs Chromium: without it, it
# skips, and this says so in one line; make browser installs it.
unit:
	@command -v chromium >/dev/null 2>&1 || echo "browser test skipped: no chromium (make browser installs Debian's; make test-browser runs it)"
	@# Every module's packages, TEST_JOBS at a time, the longest first
	@# (see scripts/test-modules).
	GO=$(GO) ROOT_TEST_ARGS=-rapid.checks=$(RAPID_CHECKS) STORE_TEST_ARGS=-rapid.checks=$(STORE_CHECKS) scripts/test-modules $(CURDIR) $(filter-out $(CURDIR),$(MODULES))

# The long run of the unit tests: the root's property tests at 10,000 cases
# each, the stores' at 100 (make test: STORE_CHECKS, 25), and the areas
# make test runs on one variant only (sqlitestore's in-memory database,
# bpsim's downstream arms on PostgreSQL) on every variant
# (BACKPRESSURE_LONG=1).
test-long:
	BACKPRESSURE_LONG=1 $(MAKE) unit RAPID_CHECKS=10000 STORE_CHECKS=100

# The README's recipe for an application module outside the checkout, run in
# a fresh module in a temporary directory on the README's quick start.
outside:
	.ci/outside

# The README's install line for outboxctl from a clone, into a temporary GOBIN.
install-check:
	.ci/install

# Every benchmark once, to prove they still run: one go test over every
# package, its output shown if one fails.
bench-smoke:
	@log=$$(mktemp); if $(GO) test -run '^$$' -bench . -benchtime=1x $(PACKAGES) >$$log 2>&1; then grep -E '^ok' $$log; rm -f $$log; else cat $$log; rm -f $$log; exit 1; fi

# The measured figures of the README: make bench (BENCHTIME=3s for steadier numbers).
bench:
	@set -e; for d in $(MODULES); do (cd $$d && $(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) ./...); done

# The end-to-end figures of the README: a 20,000-row backlog drained by
# River, graphile-worker and dispatch on PostgreSQL (and on SQLite), a
# summary table of issue 31's drain rows after it; the fair-10-wide arm at
# 200,000 rows against 20,000 (BenchmarkBacklogGrowth, its own summary);
# and each store's own drain loop.
bench-drain:
	cd bench/graphile && npm ci --no-audit --no-fund --loglevel=error
	cd bench && $(GO) test -run '^$$' -bench Drain -benchtime=3x -count=3 -timeout=45m
	cd bench && $(GO) test -run '^$$' -bench BacklogGrowth -benchtime=2x -timeout=30m
	cd pgstore && $(GO) test -run '^$$' -bench Drain -benchtime=3x
	cd sqlitestore && $(GO) test -run '^$$' -bench Drain -benchtime=3x

# The history's cost (README, "Measured figures"): dispatch.Operate.History
# on and off side by side at 2,000 rows/s on PostgreSQL, 1 and 3 nodes
# (about 8 minutes).
bench-history:
	cd bench && PGSTORE_REQUIRE=1 $(GO) test -run '^$$' -bench HistoryCost -benchtime=3x -timeout=30m

# The steady-state figures of the README: a producer at 500 and 2,000 rows/s,
# enqueue → handler start and the database's CPU per row, dispatch against
# River on PostgreSQL and on SQLite, then a summary table of issue 31's
# steady rows.
bench-steady:
	cd bench && $(GO) test -run '^$$' -bench Steady -benchtime=2x -timeout=30m

# The large membership chaos run (20,000 rows, nodes killed, paused, restarted
# and added), and the large cluster-wide rate bound run (4 nodes, 100 rows/s,
# a 6,000-row backlog, 10 nodes killed and restarted); make test runs a
# smaller one of each.
chaos:
	cd pgstore && PGSTORE_CHAOS=1 $(GO) test -race -count=1 -run '^TestChaosMembership$$' -v -timeout 9m .
	cd pgstore && PGSTORE_CHAOS=1 $(GO) test -race -count=1 -run '^TestRateBoundAcrossProcesses$$' -v -timeout 9m .

# Two failovers of a PostgreSQL 15 primary to its synchronous standby under a
# dispatcher fleet's load (servers on ports 55432 and 55433, made and removed
# by scripts/failover): rows lost, settled twice, and the time to the first
# claim on the new primary.
failover:
	GO=$(GO) scripts/failover run

# Coverage-guided fuzzing of the planner, the gate and its classes, FUZZTIME each.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime=$(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzGateVerify$$' -fuzztime=$(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime=$(FUZZTIME) ./handoff

# Debian's headless Chromium, for the admin pages' browser test
# (chromedp drives it over the DevTools protocol).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
	@chromium --version

# The browser tests alone (the pages and actions; a draining tenant's
# history charts on SQLite and PostgreSQL), Chromium installed first; their
# screenshots go to docs/ with SCREENSHOTS=1.
test-browser: browser
	cd cmd/outboxctl && $(GO) test -race -count=1 -v -run '^TestBrowser(History)?$$' ./internal/ctl $(if $(SCREENSHOTS),-update-screenshots)

clean:
	rm -rf $(BIN) bpsim-out

# Redraw the README's charts from bpsim's default, weights, hand-off, rates and downstream scenarios.
chart:
	$(GO) run ./cmd/bpsim -quiet -out $${TMPDIR:-/tmp}/bpsim-docs
	cp $${TMPDIR:-/tmp}/bpsim-docs/bpsim.png docs/bpsim.png
	$(GO) run ./cmd/bpsim -quiet -scenario cmd/bpsim/scenarios/weights.json -out $${TMPDIR:-/tmp}/bpsim-weights
	cp $${TMPDIR:-/tmp}/bpsim-weights/backpressure.png docs/bpsim-weights.png
	$(GO) run ./cmd/bpsim -quiet -scenario cmd/bpsim/scenarios/handoff.json -out $${TMPDIR:-/tmp}/bpsim-handoff
	cp $${TMPDIR:-/tmp}/bpsim-handoff/backpressure.png docs/bpsim-handoff.png
	$(GO) run ./cmd/bpsim -quiet -scenario cmd/bpsim/scenarios/rates.json -out $${TMPDIR:-/tmp}/bpsim-rates
	cp $${TMPDIR:-/tmp}/bpsim-rates/backpressure-starts.png docs/bpsim-rates.png
	$(GO) run ./cmd/bpsim -quiet -scenario cmd/bpsim/scenarios/downstream.json -out $${TMPDIR:-/tmp}/bpsim-downstream
	cp $${TMPDIR:-/tmp}/bpsim-downstream/downstream.png docs/bpsim-downstream.png
