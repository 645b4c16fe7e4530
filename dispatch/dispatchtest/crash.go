// Package dispatchtest tests a store under a [dispatch.Dispatcher] that
// crashes: a store's own tests call [Crash.Run].
//
// The parent test enqueues rows while a child process (the same test
// binary, re-executed) runs a Dispatcher on the store; the parent SIGKILLs
// the child repeatedly, restarts it, and finally checks that every row was
// settled, exactly once, and none lost. Handlers may run more than once
// for a row (a crash between a handler and its settle); settles never do.
package dispatchtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// childEnv names the journal a child process writes; its presence is what
// makes [Crash.Run] run as the child.
const childEnv = "DISPATCHTEST_CRASH_JOURNAL"

// Crash configures a crash test. Only Open is required.
type Crash struct {
	// Open opens the store under test. It is called in the parent and in
	// every child process, and every call must open the same outbox: dir
	// is a fresh directory of the parent's, the same in every child (put a
	// SQLite file in it); a PostgreSQL test uses a schema name that does
	// not depend on the process, and resets it only where [IsChild] is
	// false. Open must not empty the outbox. Give the store a short lease
	// (say 1s): a killed child's rows come back only when their leases
	// expire.
	Open func(ctx context.Context, dir string) (outbox.Store, error)

	Rows       int // rows enqueued in all; default 2,000
	Namespaces int // tenants the rows are spread over; default 10
	Kills      int // children SIGKILLed before the last one drains; default 5
	Workers    int // each child's Options.Workers; default 16
	BatchSize  int // each child's BatchSize; default 64
	Quota      int // each namespace's quota; default 8
	Seed       uint64
	// Timeout bounds the whole test, a failsafe; default 5 minutes.
	Timeout time.Duration

	// Handler, when not nil, is called once in each child to build the
	// handler under test (a relay to a broker, say): each row's handler
	// journals its run, fails the first attempt of about one key in five
	// (so that retries run through the crashes too), and otherwise returns
	// what Handler's handler returns. Nil: the rows' handler does nothing
	// more. The handler's ctx ends when the child stops cleanly.
	Handler func(ctx context.Context) (dispatch.Handler, error)
}

// CrashResult is what a parent's [Crash.Run] saw; a child's is zero.
type CrashResult struct {
	Rows   int // rows enqueued, and settled
	Kills  int // children SIGKILLed
	Reruns int // handler runs repeated after a crash: runs past the planned failure, beyond each row's first
}

func (c *Crash) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Rows, 2000)
	def(&c.Namespaces, 10)
	def(&c.Kills, 5)
	def(&c.Workers, 16)
	def(&c.BatchSize, 64)
	def(&c.Quota, 8)
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
}

// IsChild reports whether this process is a crash test's child, which
// must reuse the parent's outbox rather than set up a fresh one.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// Run runs the crash test. Call it from a test function of its own (the
// child re-runs that test by name, so the test must reach Run the same way
// in the child); in the child it runs the dispatcher instead, until the
// parent kills it or closes its stdin. It fails t if a row is not settled
// in the end, or was settled twice.
//
// A test that checks more after Run (what a broker received, say) checks
// it only where [IsChild] is false, from the CrashResult Run returns.
func (c Crash) Run(t *testing.T) CrashResult {
	c.defaults()
	if journal := os.Getenv(childEnv); journal != "" {
		c.child(t, journal)
		return CrashResult{}
	}
	return c.parent(t)
}

// The journal: one line per event, appended by the child in one write.
//
//	run <key> <attempt>      a handler started
//	settle <key> <token>     the store applied a settle
const (
	evRun    = "run"
	evSettle = "settle"
)

// failsOnce reports whether key's first attempt fails, so that retries run
// through the crashes too: about one key in five.
func failsOnce(key string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()%5 == 0
}

func (c Crash) child(t *testing.T, journal string) {
	f, err := os.OpenFile(journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("child: journal: %v", err)
	}
	defer f.Close()
	var mu sync.Mutex
	record := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		mu.Lock()
		defer mu.Unlock()
		if _, err := f.WriteString(line); err != nil {
			panic("dispatchtest: journal: " + err.Error())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the parent closes stdin to stop the child cleanly
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	store, err := c.Open(ctx, filepath.Dir(journal))
	if err != nil {
		t.Fatalf("child: Open: %v", err)
	}
	defer store.Close()
	bp, err := backpressure.New(backpressure.Config{BatchSize: c.BatchSize, DefaultQuota: c.Quota}, everyShard(t, store.ShardCount()))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var under dispatch.Handler
	if c.Handler != nil {
		if under, err = c.Handler(ctx); err != nil {
			t.Fatalf("child: Handler: %v", err)
		}
	}
	handler := func(ctx context.Context, row outbox.Row) error {
		record("%s %s %d", evRun, row.DispatchKey, row.Attempts)
		if row.Attempts == 1 && failsOnce(row.DispatchKey) {
			return errors.New("dispatchtest: first attempt fails")
		}
		if under != nil {
			return under(ctx, row)
		}
		return nil
	}
	d, err := dispatch.New(bp, store, handler, dispatch.Options{
		Workers:      c.Workers,
		PollInterval: 20 * time.Millisecond,
		Backoff:      dispatch.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics:      settleJournal{record: record},
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("child: Run: %v", err)
	}
}

// settleJournal records every settle the store applied.
type settleJournal struct {
	dispatch.NopMetrics
	record func(format string, args ...any)
}

func (s settleJournal) Completed(e dispatch.CompletionEvent) {
	if e.State == outbox.StateSettled {
		s.record("%s %s %d", evSettle, e.Row.DispatchKey, e.Row.Token)
	}
}

func everyShard(t *testing.T, n int) backpressure.OwnedShardFraction {
	owned := make([]int, n)
	for i := range owned {
		owned[i] = i
	}
	f, err := backpressure.NewOwnedShardFraction(owned, n)
	if err != nil {
		t.Fatalf("shards: %v", err)
	}
	return f
}

// childProc is a running child.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

func (c Crash) startChild(t *testing.T, journal, stderr string) *childProc {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.timeout="+c.Timeout.String())
	cmd.Env = append(os.Environ(), childEnv+"="+journal)
	errf, err := os.OpenFile(stderr, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("child stderr: %v", err)
	}
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = errf, errf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("child stdin: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child: %v", err)
	}
	p := &childProc{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p
}

// journalCounts reads the journal: settles per key, and runs per key that
// went on past the planned first-attempt failure (to Handler's handler,
// when set). A row of failsOnce whose first claim was lost before its
// handler ran never has that failure, so counting the planned failure
// from the key alone would miss one repeated run.
func journalCounts(t *testing.T, path string) (settles, runs map[string]int) {
	settles, runs = map[string]int{}, map[string]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return settles, runs
	}
	if err != nil {
		t.Fatalf("journal: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line torn by SIGKILL
		}
		switch fields[0] {
		case evRun:
			if fields[2] == "1" && failsOnce(fields[1]) {
				continue // the planned failure: it never reaches Handler's handler
			}
			runs[fields[1]]++
		case evSettle:
			settles[fields[1]]++
		}
	}
	return settles, runs
}

// parent runs the crash test's parent side (see the package doc): rounds
// of a child killed at a random point of its progress, then a last child
// that drains the outbox, then the checks.
func (c Crash) parent(t *testing.T) CrashResult {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	dir := t.TempDir()
	store, err := c.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer store.Close()
	p := &crashParent{Crash: c, t: t, ctx: ctx, store: store,
		journal: filepath.Join(dir, "journal"), stderr: filepath.Join(dir, "stderr"),
		rnd: rand.New(rand.NewPCG(c.Seed, 0x6469737061746368))}
	t.Cleanup(p.logStderr)
	p.killRounds()
	p.drain()
	return p.check()
}

// crashParent is the parent's state during one crash test: its store, the
// children's journal and stderr files, the seeded draws, and how many rows
// it has enqueued (keys crashKey(0) to crashKey(next−1)).
type crashParent struct {
	Crash
	t               *testing.T
	ctx             context.Context
	store           outbox.Store
	journal, stderr string
	rnd             *rand.Rand
	next            int
}

// crashKey is the dispatch key of the crash test's k-th row.
func crashKey(k int) string { return fmt.Sprintf("crash-%06d", k) }

// logStderr logs the tail of the children's stderr when the test failed.
func (p *crashParent) logStderr() {
	if p.t.Failed() {
		if b, err := os.ReadFile(p.stderr); err == nil && len(b) > 0 {
			p.t.Logf("children's stderr (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	}
}

// enqueueUpTo enqueues rows, in batches of 1 to 40, until n are enqueued,
// spread over the namespaces round-robin.
func (p *crashParent) enqueueUpTo(n int) {
	for p.next < n {
		batch := min(n-p.next, 1+p.rnd.IntN(40))
		msgs := make([]outbox.Message, batch)
		for i := range msgs {
			k := p.next + i
			msgs[i] = outbox.Message{
				DispatchKey: crashKey(k),
				Namespace:   fmt.Sprintf("tenant-%d", k%p.Namespaces),
				TaskQueue:   "q",
			}
		}
		if _, err := p.store.Enqueue(p.ctx, msgs); err != nil {
			p.t.Fatalf("Enqueue: %v", err)
		}
		p.next += batch
	}
}

// poll waits until cond holds, failing the test (waiting for what) when
// the test's timeout ends first.
func (p *crashParent) poll(what string, cond func() bool) {
	for !cond() {
		select {
		case <-p.ctx.Done():
			p.t.Fatalf("waiting for %s: %v", what, p.ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// settled is how many rows the journal shows settled.
func (p *crashParent) settled() int {
	s, _ := journalCounts(p.t, p.journal)
	return len(s)
}

// killRounds runs Kills rounds: each starts a child, enqueues the round's
// rows while it runs, and SIGKILLs it at a random point of its progress.
func (p *crashParent) killRounds() {
	perRound := p.Rows / (p.Kills + 1)
	for round := range p.Kills {
		child := p.startChild(p.t, p.journal, p.stderr)
		p.enqueueUpTo((round + 1) * perRound)
		target := p.settled() + 1 + p.rnd.IntN(max(1, perRound))
		p.poll(fmt.Sprintf("round %d's progress", round), func() bool { return p.settled() >= min(target, p.next) })
		if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			p.t.Fatalf("SIGKILL: %v", err)
		}
		<-child.done
	}
}

// drain starts the last child, enqueues the remaining rows, waits until
// the store counts every row settled, then stops the child cleanly.
func (p *crashParent) drain() {
	child := p.startChild(p.t, p.journal, p.stderr)
	p.enqueueUpTo(p.Rows)
	p.poll("every row settled", func() bool {
		st, err := p.store.Stats(p.ctx)
		return err == nil && st.Settled == p.Rows
	})
	_ = child.stdin.Close()
	if err := <-child.done; err != nil {
		p.t.Errorf("last child: %v", err)
	}
}

// check checks the end state: the store's Stats count every row settled
// and no other; every row is settled, was settled at most once by the
// journal, and had its handler run. It returns what the test saw.
func (p *crashParent) check() CrashResult {
	t := p.t
	st, err := p.store.Stats(p.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if want := (outbox.Stats{Settled: p.Rows, Total: p.Rows}); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	settles, runs := journalCounts(t, p.journal)
	reruns := 0
	for k := range p.Rows {
		key := crashKey(k)
		row, err := p.store.Get(p.ctx, key)
		if err != nil {
			t.Errorf("Get(%s): %v", key, err)
			continue
		}
		if row.State != outbox.StateSettled {
			t.Errorf("row %s is %s, want settled", key, row.State)
		}
		if settles[key] > 1 {
			t.Errorf("row %s settled %d times", key, settles[key])
		}
		if runs[key] == 0 {
			t.Errorf("row %s settled without its handler running", key)
		}
		reruns += max(0, runs[key]-1)
	}
	t.Logf("%d rows settled through %d kills; %d handler runs repeated after a crash", p.Rows, p.Kills, reruns)
	return CrashResult{Rows: p.Rows, Kills: p.Kills, Reruns: reruns}
}
