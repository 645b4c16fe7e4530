package sqlitestore

import (
	"fmt"
	"strings"

	"github.com/outboxkit/backpressure"
)

// SchemaSQL returns the SQL that creates the outbox at the newest schema
// version in an empty database, with shardCount recorded (0 means 64), for
// a migration tool that applies schemas itself: the statements Open would
// run, in one transaction. An existing database must be migrated by Open
// instead. An invalid shard count is a [*backpressure.ShardError].
func SchemaSQL(shardCount int) (string, error) {
	if shardCount == 0 {
		shardCount = defaultShardCount
	}
	if _, err := backpressure.NewOwnedShardFraction(nil, shardCount); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- sqlitestore schema, version %d\nBEGIN IMMEDIATE;\n", schemaVersion)
	b.WriteString("CREATE TABLE outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT, WITHOUT ROWID;\n")
	for v, m := range migrations {
		fmt.Fprintf(&b, "\n-- migration %d\n%s\n", v+1, strings.TrimSpace(m))
	}
	fmt.Fprintf(&b, "\nINSERT INTO outbox_meta (key, value) VALUES ('schema_version', %d), ('shard_count', %d);\nCOMMIT;\n", schemaVersion, shardCount)
	return b.String(), nil
}
