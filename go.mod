module github.com/outboxkit/backpressure

go 1.25

require (
	github.com/stretchr/testify v1.12.1 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
