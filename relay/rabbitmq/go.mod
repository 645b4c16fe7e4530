module github.com/outboxkit/backpressure/relay/rabbitmq

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/outboxkit/backpressure v0.1.0
	github.com/outboxkit/backpressure/pgstore v0.1.0
	github.com/outboxkit/backpressure/sqlitestore v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
)
