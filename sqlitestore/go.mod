module github.com/outboxkit/backpressure/sqlitestore

go 1.25

require github.com/outboxkit/backpressure v0.0.0

replace github.com/outboxkit/backpressure => ../
