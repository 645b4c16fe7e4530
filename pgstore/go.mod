module github.com/outboxkit/backpressure/pgstore

go 1.25

require github.com/outboxkit/backpressure v0.0.0

replace github.com/outboxkit/backpressure => ../
