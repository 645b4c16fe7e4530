package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/backpressure/pgstore"
)

// pgDatabase runs each policy in a fresh schema of one PostgreSQL database
// and drops the schemas on Close.
type pgDatabase struct {
	pool    *pgxpool.Pool
	name    string // "postgres host:port/db", no credentials
	run     string // random, so concurrent runs never share a schema
	schemas []string
}

// openPostgres connects to the database at dsn and checks that it answers.
func openPostgres(ctx context.Context, dsn string) (*pgDatabase, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bpsim: postgres database: bad -dsn: %w", redactErr(err, dsn))
	}
	name := fmt.Sprintf("postgres database %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bpsim: %s: %w", name, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("bpsim: %s: %w", name, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &pgDatabase{pool: pool, name: name, run: hex.EncodeToString(b[:])}, nil
}

// redactErr keeps a password in dsn out of an error message.
func redactErr(err error, dsn string) error {
	cfg, perr := pgx.ParseConfig(dsn)
	if perr != nil || cfg.Password == "" || !strings.Contains(err.Error(), cfg.Password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), cfg.Password, "xxxxx"))
}

func (d *pgDatabase) Name() string { return d.name }

// ReportName names the database and the policy's schema, which Close drops.
func (d *pgDatabase) ReportName(policy string) string {
	return d.name + " (schema " + d.schema(policy) + ", dropped after the run)"
}

func (d *pgDatabase) schema(policy string) string {
	return "bpsim_" + d.run + "_" + strings.ReplaceAll(policy, "-", "_")
}

// ErrDSN matches every error [CheckDSN] returns.
var ErrDSN = errors.New("bpsim: bad -dsn")

// CheckDSN parses dsn as pgx would, without connecting, so that a malformed
// -dsn is reported before the run. Its error matches [ErrDSN] and holds no
// password.
func CheckDSN(dsn string) error {
	if _, err := pgxpool.ParseConfig(dsn); err != nil {
		return fmt.Errorf("%w: %w", ErrDSN, redactErr(err, dsn))
	}
	return nil
}

func (d *pgDatabase) Open(ctx context.Context, policy string, opts storeOptions) (*simStore, error) {
	schema := d.schema(policy)
	d.schemas = append(d.schemas, schema)
	name := d.name + " schema " + schema
	s, err := pgstore.New(ctx, d.pool, pgstore.Options{Schema: schema, ShardCount: opts.ShardCount, Lease: opts.Lease, Now: opts.Now, PendingCaps: opts.PendingCaps})
	if err != nil {
		return nil, fmt.Errorf("bpsim: %s: %w", name, err)
	}
	return newSimStore(s, name)
}

// Close drops every schema Open made, even when the run was cancelled, and
// closes the pool.
func (d *pgDatabase) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, schema := range d.schemas {
		if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("bpsim: %s: dropping schema %s: %w", d.name, schema, err))
		}
	}
	d.pool.Close()
	return errors.Join(errs...)
}
