// Package conformance holds tests that cross every driver of stagger at
// once, against the real servers on loopback: the attempt ledger of one
// logical request handed from HTTP to the queue, RabbitMQ, JetStream,
// Kafka and gRPC and back. It has no code of its own.
package conformance
