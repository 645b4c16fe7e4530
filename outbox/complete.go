package outbox

import (
	"strconv"
	"time"
)

// Lease names one claim of one row: the row's dispatch key and the token the
// claim drew. Every completion and extension is fenced by it: it takes
// effect only while the row is claimed with this token and the lease is
// live.
type Lease struct {
	DispatchKey string
	Token       int64
}

// Outcome is what a [Completion] does to its row.
type Outcome uint8

// The outcomes. The zero Outcome is invalid, so a forgotten field is an
// error rather than a settle.
const (
	// Settle marks the row done: settled, never claimed again.
	Settle Outcome = iota + 1
	// Retry puts the row back to pending, claimable after Delay, and
	// records Error; once the row has had its MaxAttempts claims it is
	// dead-lettered instead.
	Retry
	// DeadLetter moves the row to dead at once, recording Error.
	DeadLetter
	// Snooze puts the row back to pending, claimable after Delay,
	// without spending an attempt: the claim's attempt is given back
	// (Attempts is one less than the claim's, so a row at its
	// MaxAttempts is never dead-lettered by a snooze), Snoozes counts
	// one more, and Error, if not empty, is recorded as the row's
	// LastError. The row keeps its place in its route (its priority and
	// enqueue order). Bounding snoozes is the caller's: a dispatcher reads
	// Row.Snoozes (see dispatch.Options.MaxSnoozes).
	Snooze
)

// String returns "settle", "retry", "dead-letter" or "snooze", and
// "Outcome(n)" for any other value.
func (o Outcome) String() string {
	switch o {
	case Settle:
		return "settle"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	case Snooze:
		return "snooze"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Completion is the result of running one claimed row, as a dispatcher
// hands it to a store's Complete.
type Completion struct {
	Lease
	Outcome Outcome
	Delay   time.Duration // Retry and Snooze: how long the row stays invisible (0 to MaxDelay)
	Error   string        // Retry, DeadLetter and Snooze: the error to record (truncated to MaxErrorBytes); "" keeps a snoozed row's last error
}

// SettleRow builds the completion that settles the claimed row r.
func SettleRow(r Row) Completion { return Completion{Lease: r.Lease(), Outcome: Settle} }

// RetryRow builds the completion that retries r after delay, recording err.
func RetryRow(r Row, delay time.Duration, err error) Completion {
	return Completion{Lease: r.Lease(), Outcome: Retry, Delay: delay, Error: errText(err)}
}

// DeadLetterRow builds the completion that dead-letters r, recording err.
func DeadLetterRow(r Row, err error) Completion {
	return Completion{Lease: r.Lease(), Outcome: DeadLetter, Error: errText(err)}
}

// SnoozeRow builds the completion that snoozes r for delay, recording
// reason (nil: none) as its last error.
func SnoozeRow(r Row, delay time.Duration, reason error) Completion {
	return Completion{Lease: r.Lease(), Outcome: Snooze, Delay: delay, Error: errText(reason)}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Result is what a batched call did to one row, at the same index as the
// row's entry in the call's argument.
type Result struct {
	// Err is nil when the entry took effect, else a [*LeaseLostError]
	// (matching [ErrLeaseLost]): the lease was not the row's current live
	// claim, and the row is unchanged.
	Err error

	// State is the row's state after the call: for a completion that took
	// effect, settled, pending (a retry or a snooze) or dead (a dead-letter, or a retry
	// past MaxAttempts); for an extension, claimed. "" when Err is set.
	State State

	// LeaseExpiresAt is, for an extension that took effect, the new end of
	// the lease; zero otherwise.
	LeaseExpiresAt time.Time
}
