package dispatch

import (
	"errors"
	"fmt"
)

// Errors of the package. Match them with [errors.Is]; the typed errors carry
// the details and match the sentinel of their kind.
var (
	// ErrInvalidOptions reports an argument or option New rejects. The
	// typed error is *[OptionError].
	ErrInvalidOptions = errors.New("dispatch: invalid options")

	// ErrRunning reports a Run called while another Run of the same
	// Dispatcher is in progress.
	ErrRunning = errors.New("dispatch: already running")

	// ErrUncleanShutdown reports a Run that had to abandon handlers at the
	// shutdown deadline, or could not write every result before it. The
	// typed error is *[ShutdownError].
	ErrUncleanShutdown = errors.New("dispatch: unclean shutdown")
)

// OptionError names the argument of New, or the field of [Options], that
// New rejects. It matches [ErrInvalidOptions].
type OptionError struct {
	Field  string // e.g. "Workers", "store", "Backoff.Jitter"
	Reason string
}

// Error names the option and why New rejects it, its value included.
func (e *OptionError) Error() string {
	return fmt.Sprintf("dispatch: invalid options: %s %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// ShutdownError is what Run returns when its shutdown was not clean. The
// rows it counts are not lost: each comes back when its lease expires and
// runs again. It matches [ErrUncleanShutdown].
type ShutdownError struct {
	// Abandoned counts the handlers still running at the shutdown
	// deadline, whose ctx Run cancelled without waiting for them, plus the
	// claimed rows never started (with Options.Queue, every row still
	// queued when Run's ctx was done).
	Abandoned int
	// Unwritten counts the results not known to be written when the
	// flush phase's deadline passed (the store failed or was too slow); Err
	// is the last store error, or the cancelled context of a write still in
	// flight.
	Unwritten int
	Err       error
}

// Error says what the shutdown left undone.
func (e *ShutdownError) Error() string {
	s := fmt.Sprintf("dispatch: unclean shutdown: %d rows abandoned, %d results unwritten", e.Abandoned, e.Unwritten)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is [ErrUncleanShutdown].
func (e *ShutdownError) Is(target error) bool { return target == ErrUncleanShutdown }

// Unwrap returns Err.
func (e *ShutdownError) Unwrap() error { return e.Err }

// PermanentError marks a handler error that retrying cannot fix: the
// dispatcher dead-letters the row at once. Build it with [Permanent]; one
// built by hand with a nil Err still dead-letters its row, recorded as
// "permanent: <nil>".
type PermanentError struct{ Err error }

// Error returns the wrapped error's text, marked permanent.
func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent: <nil>"
	}
	return "permanent: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that a handler returning it (wrapped further or
// not) dead-letters its row instead of retrying it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, came from
// [Permanent].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// PanicError is the error a handler's panic is recorded as: the row is
// retried like any handler error, the log line carries Stack, and the row's
// recorded error is Error(), without the stack.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the goroutine's stack at the panic
}

// Error names the value the handler panicked with.
func (e *PanicError) Error() string { return fmt.Sprintf("dispatch: handler panicked: %v", e.Value) }
