package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// README: idempotent handler begins

// creditPoints makes a handler's effect idempotent: it records the row's
// dispatch key in the same transaction as the effect, so a second run of
// the row (after a crash, or a lost lease) finds the key and changes
// nothing. Execution is at least once; with this, the effect is once.
func creditPoints(db *sql.DB) dispatch.Handler {
	return func(ctx context.Context, row outbox.Row) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op once committed
		res, err := tx.ExecContext(ctx, `INSERT INTO effects (dispatch_key, token) VALUES (?, ?)
			ON CONFLICT (dispatch_key) DO NOTHING`, row.DispatchKey, row.Token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // done by an earlier run: nil settles the row again, with no second effect
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET points = points + 10 WHERE id = ?`, string(row.Payload)); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// README: idempotent handler ends

// A handler runs at least once: after a crash, or when its lease is lost,
// its row runs again. creditPoints (in the README) records the dispatch key
// in the transaction of its effect, so the second run credits nothing.
func Example_idempotentHandler() {
	dir, _ := os.MkdirTemp("", "idempotent")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE accounts (id TEXT PRIMARY KEY, points INTEGER NOT NULL)`,
		`CREATE TABLE effects (dispatch_key TEXT PRIMARY KEY, token INTEGER NOT NULL)`,
		`INSERT INTO accounts VALUES ('alice', 0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	handle := creditPoints(db)
	first := outbox.Row{DispatchKey: "order-1/points", Payload: []byte("alice"), Token: 7}
	again := first
	again.Token = 9 // the row claimed again after its first run's lease was lost
	fmt.Println(handle(ctx, first), handle(ctx, again))
	var points int
	if err := db.QueryRowContext(ctx, `SELECT points FROM accounts WHERE id = 'alice'`).Scan(&points); err != nil {
		panic(err)
	}
	fmt.Println("alice has", points, "points")
	// Output:
	// <nil> <nil>
	// alice has 10 points
}

// TestREADMEIdempotentHandler: the README's idempotent handler is
// creditPoints above, byte for byte (but for the whitespace at either
// end), so the pattern it shows compiles and does what Example_idempotentHandler
// checks.
func TestREADMEIdempotentHandler(t *testing.T) {
	src, err := os.ReadFile("example_idempotent_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(src), "// README: idempotent handler begins\n")
	code, _, ok2 := strings.Cut(code, "// README: idempotent handler ends\n")
	if !ok || !ok2 {
		t.Fatal("example_idempotent_test.go lost its README markers")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatalf("reading the repository's README (this test runs inside a checkout): %v", err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## At least once: idempotent handlers\n")
	if !ok {
		t.Fatal(`README.md has no "## At least once: idempotent handlers" section`)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, ok2 = strings.Cut(block, "\n```\n")
	if !ok || !ok2 {
		t.Fatal("the README's idempotent-handler section has no ```go block")
	}
	if strings.TrimSpace(block) != strings.TrimSpace(code) {
		t.Errorf("the README's idempotent handler differs from creditPoints in sqlitestore/example_idempotent_test.go; copy it into the README:\n%s", strings.TrimSpace(code))
	}
}
