module github.com/staggerhq/stagger/broker/jetstream

go 1.25.0

require (
	github.com/nats-io/nats.go v1.53.0
	github.com/staggerhq/stagger v0.1.0
)

require (
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/nats-io/nkeys v0.4.15 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.49.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
)
