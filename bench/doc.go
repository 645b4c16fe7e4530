// Package bench measures what users feel, end to end, against the job queue
// they would otherwise pick: a backlog of no-op jobs enqueued, claimed, run
// and completed on one PostgreSQL database, by River and by this project's
// dispatcher, in the same run, reported as rows/s and as a ratio (the
// machines are shared and noisy, so only ratios taken side by side mean
// much).
//
// It is a module of its own so that River stays out of every other
// module's dependencies. Run it with make bench-river, or:
//
//	cd bench && go test -run '^$' -bench . -benchtime 3x
//
// It needs PostgreSQL (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and skips
// without it.
package bench
