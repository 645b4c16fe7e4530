package rabbitmq

import amqp "github.com/rabbitmq/amqp091-go"

// SetBlocked stands in for the broker's connection.blocked and
// .unblocked: raising a resource alarm would block every client of the
// shared broker.
func SetBlocked(r *Relay, b amqp.Blocking) { r.setBlocked(b) }
