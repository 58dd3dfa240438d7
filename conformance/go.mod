module github.com/staggerhq/stagger/conformance

go 1.25.0

require (
	github.com/nats-io/nats.go v1.53.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/staggerhq/stagger v0.1.0
	github.com/staggerhq/stagger/broker/jetstream v0.1.0
	github.com/staggerhq/stagger/broker/kafka v0.1.0
	github.com/staggerhq/stagger/broker/rabbitmq v0.1.0
	github.com/staggerhq/stagger/grpc v0.1.0
	github.com/staggerhq/stagger/queue/sqlite v0.1.0
	github.com/twmb/franz-go v1.21.7
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260218055430-fc72d8313608
	google.golang.org/grpc v1.84.0
)
