package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/backpressure"
)

// Enqueue inserts msgs in one transaction, all or none, and returns how many
// it inserted: a message whose dispatch key already exists (in the store, in
// any state, or earlier in msgs) is ignored, so enqueueing is idempotent.
// Each row is placed on backpressure.ShardFor(DispatchKey, ShardCount),
// pending and visible now.
//
// A message with an empty DispatchKey or Namespace, or a DispatchKey,
// Namespace or TaskQueue that is not valid UTF-8 or holds a NUL byte, fails
// the whole batch with an *ArgumentError (ErrInvalidArgument) before
// anything is written. (Claims name routes as JSON text, which cannot carry
// such bytes: a row on such a route would be counted pending but never
// claimed.) Cost: one write transaction, O(len(msgs)) index inserts.
func (s *Store) Enqueue(ctx context.Context, msgs []Message) (inserted int, err error) {
	for i, m := range msgs {
		for _, f := range []struct {
			name, value string
			required    bool
		}{{"DispatchKey", m.DispatchKey, true}, {"Namespace", m.Namespace, true}, {"TaskQueue", m.TaskQueue, false}} {
			if err := checkText("msgs["+strconv.Itoa(i)+"]."+f.name, f.value, f.required); err != nil {
				return 0, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	now := nanos(s.now())
	err = s.write(ctx, func(tx *sql.Tx) error {
		insert, err := tx.PrepareContext(ctx, `
INSERT INTO outbox (dispatch_key, namespace, task_queue, shard, payload, enqueued_at, visible_at, ready_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?6)
ON CONFLICT (dispatch_key) DO NOTHING`)
		if err != nil {
			return err
		}
		defer insert.Close()
		addRoute, err := tx.PrepareContext(ctx, `INSERT INTO outbox_routes (namespace, task_queue) VALUES (?, ?) ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		defer addRoute.Close()
		routes := map[backpressure.Route]bool{}
		for _, m := range msgs {
			if err := s.step(ctx); err != nil {
				return err
			}
			payload := m.Payload
			if payload == nil {
				payload = []byte{}
			}
			res, err := insert.ExecContext(ctx, m.DispatchKey, m.Namespace, m.TaskQueue,
				backpressure.ShardFor(m.DispatchKey, s.shardCount), payload, now)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			inserted += int(n)
			r := backpressure.Route{Namespace: m.Namespace, TaskQueue: m.TaskQueue}
			if n == 1 && !routes[r] {
				routes[r] = true
				if err := s.step(ctx); err != nil {
					return err
				}
				if _, err := addRoute.ExecContext(ctx, r.Namespace, r.TaskQueue); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: enqueue: %w", err)
	}
	return inserted, nil
}

// checkText returns an *ArgumentError naming name when v cannot be a
// dispatch key, namespace or task queue: empty (when required), not valid
// UTF-8, or holding a NUL byte. Otherwise it returns nil.
func checkText(name, v string, required bool) error {
	var reason string
	switch {
	case required && v == "":
		reason = "must not be empty"
	case !utf8.ValidString(v):
		reason = "must be valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		reason = "must not contain a NUL byte"
	default:
		return nil
	}
	return &ArgumentError{Name: name, Value: strconv.Quote(v), Reason: reason}
}
