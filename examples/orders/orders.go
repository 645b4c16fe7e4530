// Package orders is a small order service on one PostgreSQL database, in two
// processes: the API (cmd/orders-api) takes orders over HTTP and, in the
// transaction that inserts an order, enqueues its fulfilment in the outbox;
// the worker (cmd/orders-worker, as many as you like) is a dispatch.Service
// that fulfils them, fair across tenants, each tenant capped at its quota.
// A tenant with too many unfulfilled orders gets HTTP 429 with Retry-After.
//
// Both read their configuration from the environment ([FromEnv]).
package orders

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Fulfil is the outbox job of one order: its task queue is named once, here.
type Fulfil struct {
	OrderID string `json:"order_id"`
}

// TaskQueue names the job's task queue.
func (Fulfil) TaskQueue() string { return "fulfil" }

// Config is what the two processes read from the environment.
type Config struct {
	DatabaseURL string // DATABASE_URL (required)
	// Schema holds the service's orders table (ORDERS_SCHEMA, default
	// "orders"); the outbox is the schema Schema+"_outbox".
	Schema string
	Addr   string // ADDR: the API's address, or the worker's health probes'
	// PendingCap is how many unfulfilled orders a tenant may have before
	// the API answers 429 (PENDING_CAP, default 1000).
	PendingCap int
	// Quota is how many of a tenant's orders the workers fulfil at once,
	// cluster-wide (QUOTA, default 10).
	Quota int
}

// FromEnv reads the Config from the environment; Addr defaults to addr. A
// missing DATABASE_URL or a number that does not parse is an error.
func FromEnv(addr string) (Config, error) {
	c := Config{
		DatabaseURL: os.Getenv("DATABASE_URL"),
		Schema:      cmp.Or(os.Getenv("ORDERS_SCHEMA"), "orders"),
		Addr:        cmp.Or(os.Getenv("ADDR"), addr),
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("orders: DATABASE_URL is not set")
	}
	var err error
	if c.PendingCap, err = envInt("PENDING_CAP", 1000); err != nil {
		return c, err
	}
	if c.Quota, err = envInt("QUOTA", 10); err != nil {
		return c, err
	}
	return c, nil
}

func envInt(name string, def int) (int, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("orders: %s=%q: want a positive integer", name, s)
	}
	return n, nil
}

func (c Config) outboxSchema() string { return c.Schema + "_outbox" }

func (c Config) table() string { return pgx.Identifier{c.Schema, "orders"}.Sanitize() }

// migrate creates the orders table if it does not exist (the outbox's
// schema is created by pgstore.New).
func (c Config) migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(`
		CREATE SCHEMA IF NOT EXISTS %s;
		CREATE TABLE IF NOT EXISTS %s (
			id           text        PRIMARY KEY,
			tenant       text        NOT NULL,
			item         text        NOT NULL,
			quantity     integer     NOT NULL CHECK (quantity > 0),
			status       text        NOT NULL DEFAULT 'placed' CHECK (status IN ('placed', 'fulfilled')),
			placed_at    timestamptz NOT NULL DEFAULT now(),
			fulfilled_at timestamptz
		)`, pgx.Identifier{c.Schema}.Sanitize(), c.table()))
	return err
}
