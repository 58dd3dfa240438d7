package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/broker/rabbitmq"
)

// rabbitTopology dials RabbitMQ (STAGGER_AMQP_URL) and declares a
// topology named name with tiers, deleted when the test ends. It returns
// the connection and its URL for a consumer.
func rabbitTopology(t *testing.T, name string, tiers broker.Tiers) (*amqp.Connection, string, rabbitmq.Topology) {
	t.Helper()
	url := env("STAGGER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		unavailable(t, "RabbitMQ at STAGGER_AMQP_URL (default 127.0.0.1:5672)", errors.New("dial failed"))
	}
	t.Cleanup(func() { conn.Close() })
	topo := rabbitmq.NewTopology(name, tiers)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = topo.Delete(ch)
		}
	})
	return conn, url, topo
}

// natsStream connects to NATS (STAGGER_NATS_URL) and creates a stream
// named stream on the subject stream.in; the stream and the consumer's
// DLQ and advisory streams are deleted when the test ends.
func natsStream(t *testing.T, ctx context.Context, stream string) (jetstream.JetStream, string) {
	t.Helper()
	nc, err := nats.Connect(env("STAGGER_NATS_URL", "nats://127.0.0.1:4222"), nats.Timeout(3*time.Second))
	if err != nil {
		unavailable(t, "NATS at STAGGER_NATS_URL (default 127.0.0.1:4222)", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := stream + ".in"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{stream, stream + "_DLQ", stream + "_ADV"} {
			_ = js.DeleteStream(ctx, s)
		}
	})
	return js, subject
}

// kfakeTopics starts franz-go's in-process kfake cluster with the topics
// of main and tiers, and a client of it; both end with the test.
func kfakeTopics(t *testing.T, main string, tiers broker.Tiers) ([]string, kafka.Topics, *kgo.Client) {
	t.Helper()
	topics := kafka.NewTopics(main, tiers)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics.All()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cluster.ListenAddrs(), topics, cl
}
