module github.com/staggerhq/stagger/broker/rabbitmq

go 1.25

require (
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/staggerhq/stagger v0.1.0
)
