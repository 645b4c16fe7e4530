package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestMain runs the program itself when the test binary is started with
// SERVICE_RUN_MAIN=1, so that TestService runs main as a user does, in a
// process of its own that a signal stops.
func TestMain(m *testing.M) {
	if os.Getenv("SERVICE_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// failsafe bounds every wait; it is never what the test asserts.
const failsafe = 60 * time.Second

// The program, end to end: a typed job enqueued with outbox.NewMessage is
// handled, /readyz and /livez answer 200 while it runs, and SIGTERM stops
// it cleanly (exit status 0, every result written).
func TestService(t *testing.T) {
	db := filepath.Join(t.TempDir(), "outbox.db")
	producer, err := sqlitestore.Open(t.Context(), db, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	msg, err := outbox.NewMessage("acme", "user-1/welcome", WelcomeEmail{To: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(t.Context(), []outbox.Message{msg}); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SERVICE_RUN_MAIN=1", "OUTBOX_DB="+db, "HEALTH_ADDR="+addr)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	waitFor(t, exited, "the row settled", func() bool {
		row, err := producer.Get(t.Context(), msg.DispatchKey)
		return err == nil && row.State == outbox.StateSettled
	})
	for _, probe := range []string{"/readyz", "/livez"} {
		waitFor(t, exited, probe+" 200", func() bool { return status(addr+probe) == http.StatusOK })
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM the service exited with %v, want status 0\n%s", err, stderr.String())
		}
	case <-time.After(failsafe):
		t.Fatal("the service did not stop after SIGTERM: failsafe passed")
	}
	for _, line := range []string{"welcome email to ann@example.com (user-1/welcome)", "dispatch: run stopped settled=1"} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("the service's output lacks %q:\n%s", line, stderr.String())
		}
	}
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// status GETs url and returns the status code, 0 on error.
func status(addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond until it holds, failing if the process exits first.
func waitFor(t *testing.T, exited <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failsafe)
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("waiting for %s: the service exited: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: failsafe passed", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
