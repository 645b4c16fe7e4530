// Package handoff audits a dispatcher's hand-off to its workers: it builds
// the gate of a worker queue fed by sweeps, models how long a queue takes to
// fill, and makes a gate's verdict checkable by the records behind it (the
// signal receipt, the producer's measured compliance, the enforced bound).
//
// Most callers need one call: [WorkerQueueGate] at start-up, refusing to
// start on its error (package dispatch does this for its own queue). The
// rest serves an operator who wants more than the yes or no of
// [backpressure.BackpressureGate.Verify]:
//
//   - [Classify] places a gate on the seed's decision boundary (enforced,
//     advisory-verified, advisory-headroom, advisory-overflow);
//   - [NewVerdict] attaches the three records and names the claims they do
//     not back ([Verdict.Gaps]);
//   - [ComplianceMonitor] measures a producer's rate against the requested
//     rate and alerts once per episode of non-compliance, the evidence
//     behind ProducerComplianceVerified;
//   - [QueueModel] answers how long an advisory signal buys before the
//     queue is full.
//
// What is exported and why: the gate itself and its verdict
// ([backpressure.AdvisoryOverflowError]) stay in the root package, which
// is all a planner's user meets; these are the instruments for checking
// the verdict's premises, which the root package does not need. Each
// exported type is a value a caller builds, logs or passes to a callback;
// the kinds and verdicts are enums with String methods for logs; errors
// are one sentinel and one typed error per input (queue model, monitor),
// matched with [errors.Is] and [errors.As]. Invalid gates and
// WorkerQueueGate's arguments report the root's *backpressure.ConfigError.
// The design notes are in docs/gate.md.
package handoff
