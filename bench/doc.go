// Package bench measures what users feel, end to end, against the job queue
// they would otherwise pick: a backlog of no-op jobs enqueued, claimed, run
// and completed on one PostgreSQL database, by River and by this project's
// dispatcher (fair and unscoped, at 10 and 1,000 namespaces), in the same
// run, arms rotating from iteration to iteration, reported as rows/s and as
// ratios (the machines are shared and noisy, so only ratios taken side by
// side mean much). See BenchmarkDrain for the arms and their settings, and
// BenchmarkSteady for the latency of rows trickling in (its
// dispatch-coalesce-2ms-kept arm is the default options with pgstore's
// kept counts on). BenchmarkKeptCounts isolates the trickle's sweep
// (count, claim, complete) to compare kept counts with counts read on
// every sweep.
//
// BenchmarkDrainSQLite and BenchmarkSteadySQLite are the same two on
// SQLite: River on its riversqlite driver against the dispatcher on
// sqlitestore, each on a database file of its own in this process. They
// need no PostgreSQL:
//
//	cd bench && go test -run '^$' -bench SQLite -benchtime 2x
//
// It is a module of its own so that River stays out of every other
// module's dependencies. Run it with make bench-drain (which runs BenchmarkDrainSQLite too), or:
//
//	cd bench && go test -run '^$' -bench 'Drain$' -benchtime 3x -count 3 -timeout 30m
//
// (4.5–6 minutes per count on the shared, loaded 2-core machine on
// 2026-12-06, 18 arms). With -benchtime=1x, as CI's bench-smoke runs it,
// the backlog is 2,000 rows instead of 20,000: that proves the benchmark
// runs, and is not the figure.
//
// After the benchmarks of a run, TestMain prints the rows of issue 31's
// table that they measured (see summary): BenchmarkDrain's ratios against
// graphile-worker, River and the unscoped dispatcher and its CPU per row,
// BenchmarkBacklogGrowth's CPU per row at 200,000 rows against 20,000 (a
// benchmark of its own: an iteration drains 220,000 rows), and
// BenchmarkSteady's CPU per row against River 1 ms and p99, each the
// median and range over -count runs, every ratio of arms paired in one
// run.
//
// BenchmarkDrainStatements says where the best fair drain's PostgreSQL CPU
// goes, by kind of statement (claims, Completes, counts, the rest and the
// commits), from the CPU each backend reports per protocol message
// (docs/pgstore.md, "Where a drained row's PostgreSQL CPU goes").
// BenchmarkSteadyStatements does the same for BenchmarkSteady's default
// arm, kept counts off and on, per statement text: what each wake-up of a
// trickle sends (docs/pgstore.md, "Where a trickle's wake-up goes").
//
// The PostgreSQL benchmarks need PostgreSQL (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and skip
// without it (fail with PGSTORE_REQUIRE set).
package bench
