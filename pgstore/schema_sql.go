package pgstore

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
)

// SchemaSQL returns the SQL that creates schema at [SchemaVersion] from
// nothing, with shardCount recorded (0 means [DefaultShardCount]), for a
// migration tool that applies schemas itself: the statements New would
// run, in one transaction, without its advisory lock. A schema that
// already exists must be migrated by New instead (or by the statements
// of its missing versions). An invalid name or shard count is an
// [*outbox.ArgumentError] or a [*backpressure.ShardError].
func SchemaSQL(schema string, shardCount int) (string, error) {
	if err := validateSchema("SchemaSQL", schema); err != nil {
		return "", err
	}
	if shardCount == 0 {
		shardCount = DefaultShardCount
	}
	if _, err := backpressure.NewOwnedShardFraction(nil, shardCount); err != nil {
		return "", err
	}
	q := pgx.Identifier{schema}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgstore schema %s, version %d\nBEGIN;\nCREATE SCHEMA %s;\n", q, SchemaVersion, q)
	fmt.Fprintf(&b, "CREATE TABLE %s.schema_version (\n\tversion    integer     PRIMARY KEY,\n\tapplied_at timestamptz NOT NULL DEFAULT now()\n);\n", q)
	for v, m := range migrations {
		fmt.Fprintf(&b, "\n-- migration %d\n%s\nINSERT INTO %s.schema_version (version) VALUES (%d);\n", v+1, strings.TrimSpace(expand(q, m)), q, v+1)
	}
	fmt.Fprintf(&b, "\nINSERT INTO %s.settings (shard_count) VALUES (%d);\nCOMMIT;\n", q, shardCount)
	return b.String(), nil
}
