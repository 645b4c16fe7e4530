package orders

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMain runs RunAPI or RunWorker when the test binary is started with
// ORDERS_RUN=api or worker, so that TestOrderService runs the service as
// its commands do: each process of its own, stopped by a signal.
func TestMain(m *testing.M) {
	if role := os.Getenv("ORDERS_RUN"); role != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		c, err := FromEnv("")
		if err == nil {
			if role == "api" {
				err = RunAPI(ctx, c)
			} else {
				err = RunWorker(ctx, c)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// failsafe bounds every wait; it is never what the test asserts.
const failsafe = 90 * time.Second

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// The order service end to end, in three processes (the API and two
// workers) on a real PostgreSQL: orders placed over HTTP are fulfilled
// exactly as placed; a tenant past its pending cap gets 429 with
// Retry-After and nothing is inserted, and the same orders go in once the
// workers have drained the backlog; a repeated order is not placed twice;
// SIGTERM stops every process with status 0.
func TestOrderService(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if os.Getenv("PGSTORE_REQUIRE") == "1" {
			t.Fatalf("PostgreSQL is required (PGSTORE_REQUIRE=1): %v", err)
		}
		t.Skipf("PostgreSQL not reachable (%v): set TEST_DATABASE_URL to run this test", err)
	}
	defer pool.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "orders_test_" + hex.EncodeToString(b[:])
	defer func() {
		for _, s := range []string{schema, schema + "_outbox"} {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
		}
	}()
	env := []string{"DATABASE_URL=" + databaseURL(), "ORDERS_SCHEMA=" + schema, "PENDING_CAP=20", "QUOTA=5"}

	api := start(t, "api", env)
	waitFor(t, api, "the API", func() bool { return get(api.addr+"/orders/none") == http.StatusNotFound })

	// No worker yet: the tenant "big" fills its pending cap.
	for i := range 25 {
		code, retryAfter := post(api.addr, Order{ID: fmt.Sprintf("big-%d", i), Tenant: "big", Item: "crate", Quantity: 1})
		switch {
		case i < 20 && code != http.StatusCreated:
			t.Fatalf("order %d of 20 under the cap: status %d, want 201", i+1, code)
		case i >= 20 && (code != http.StatusTooManyRequests || retryAfter == ""):
			t.Fatalf("order %d past the cap of 20: status %d, Retry-After %q; want 429 with Retry-After", i+1, code, retryAfter)
		}
	}
	if code, _ := post(api.addr, Order{ID: "big-0", Tenant: "big", Item: "crate", Quantity: 1}); code != http.StatusOK {
		t.Fatalf("a repeated order: status %d, want 200", code)
	}
	if n := count(t, pool, schema, ""); n != 20 {
		t.Fatalf("%d orders stored, want 20: the refused ones must not be", n)
	}

	workers := []*proc{start(t, "worker", env), start(t, "worker", env)}
	// Small tenants alongside, then big's refused orders once there is room.
	for i := range 30 {
		tenant := []string{"ann", "bob", "cy"}[i%3]
		if code, _ := post(api.addr, Order{ID: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Item: "box", Quantity: 2}); code != http.StatusCreated {
			t.Fatalf("order of %s: status %d", tenant, code)
		}
	}
	for i := 20; i < 25; i++ {
		id := fmt.Sprintf("big-%d", i)
		waitFor(t, api, id+" accepted after a Retry-After", func() bool {
			code, _ := post(api.addr, Order{ID: id, Tenant: "big", Item: "crate", Quantity: 1})
			return code == http.StatusCreated
		})
	}
	waitFor(t, api, "every order fulfilled", func() bool { return count(t, pool, schema, "fulfilled") == 55 })
	if n := count(t, pool, schema, ""); n != 55 {
		t.Errorf("%d orders stored, want 55", n)
	}
	for _, w := range workers {
		waitFor(t, w, "worker /readyz 200", func() bool { return get(w.addr+"/readyz") == http.StatusOK })
	}
	var o Order
	if err := getJSON(api.addr+"/orders/big-24", &o); err != nil || o.Status != "fulfilled" || o.Tenant != "big" {
		t.Errorf("GET /orders/big-24 = %+v, %v; want big's order, fulfilled", o, err)
	}
	for _, p := range append(workers, api) {
		p.stop(t)
	}
}

// proc is one of the service's processes.
type proc struct {
	role   string
	addr   string
	cmd    *exec.Cmd
	exited chan error
	out    *lockedBuffer
}

func start(t *testing.T, role string, env []string) *proc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &proc{role: role, addr: addr, exited: make(chan error, 1), out: &lockedBuffer{}}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(append(os.Environ(), env...), "ORDERS_RUN="+role, "ADDR="+addr)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// stop sends SIGTERM and wants exit status 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("%s: after SIGTERM exited with %v, want status 0\n%s", p.role, err, p.out)
		}
	case <-time.After(failsafe):
		t.Errorf("%s did not stop after SIGTERM: failsafe passed", p.role)
	}
}

// waitFor polls cond until it holds, failing if p exits first.
func waitFor(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failsafe)
	for !cond() {
		select {
		case err := <-p.exited:
			t.Fatalf("waiting for %s: %s exited: %v\n%s", what, p.role, err, p.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: failsafe passed\n%s", what, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, schema, status string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE $1 = '' OR status = $1`,
		pgx.Identifier{schema, "orders"}.Sanitize()), status).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func post(addr string, o Order) (code int, retryAfter string) {
	body, _ := json.Marshal(o)
	resp, err := http.Post("http://"+addr+"/orders", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, ""
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func get(url string) int {
	resp, err := http.Get("http://" + url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func getJSON(url string, v any) error {
	resp, err := http.Get("http://" + url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// lockedBuffer is a process's output, written by its pipes' copiers and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
