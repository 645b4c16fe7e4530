package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

// rowColumns are the columns scanRow reads, in order, qualified by o.
const rowColumns = `o.id, o.dispatch_key, o.namespace, o.task_queue, o.shard, o.payload, o.state,
	o.attempts, o.max_attempts, o.token, o.enqueued_at, o.visible_at, o.claimed_at,
	o.lease_expires_at, o.finished_at, o.last_error, o.priority, o.headers, o.snoozes`

// scanRow reads rowColumns (plus any extra destinations after them).
func scanRow(rows pgx.CollectableRow, extra ...any) (outbox.Row, error) {
	var (
		r                         outbox.Row
		state                     string
		shard, attempts, maxTries int32
		snoozes                   int32
		priority                  int16
		claimed, leased, finished *time.Time
		headers                   []byte
	)
	dest := append([]any{&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &shard, &r.Payload, &state,
		&attempts, &maxTries, &r.Token, &r.EnqueuedAt, &r.RunAt, &claimed, &leased, &finished, &r.LastError, &priority, &headers, &snoozes}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return outbox.Row{}, err
	}
	r.State = outbox.State(state)
	r.Shard, r.Attempts, r.MaxAttempts, r.Priority, r.Snoozes = int(shard), int(attempts), int(maxTries), int(priority), int(snoozes)
	r.EnqueuedAt, r.RunAt = r.EnqueuedAt.UTC(), r.RunAt.UTC()
	r.ClaimedAt, r.LeaseExpiresAt, r.FinishedAt = utc(claimed), utc(leased), utc(finished)
	if len(headers) > 0 {
		h, err := outbox.DecodeHeaders(headers)
		if err != nil {
			return outbox.Row{}, err
		}
		r.Headers = h
	}
	return r, nil
}

// utc returns *t in UTC, or the zero time for NULL.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
