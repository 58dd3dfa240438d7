package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

func runBrokerCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"broker"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestBrokerRedriveHelp(t *testing.T) {
	code, out, _ := runBrokerCLI("redrive", "--help")
	if code != 0 || !strings.Contains(out, "Usage: stagger broker redrive") || !strings.Contains(out, "-rate") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	if code, _, _ := runBrokerCLI(); code != 2 {
		t.Errorf("stagger broker with no subcommand: exit %d, want 2", code)
	}
	if code, _, _ := runBrokerCLI("nope"); code != 2 {
		t.Errorf("unknown subcommand: exit %d, want 2", code)
	}
}

func TestBrokerRedriveBadFlags(t *testing.T) {
	base := []string{"redrive", "--broker", "rabbitmq", "--dlq", "q"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"redrive", "--dlq", "q"}, "--broker is required"},
		{[]string{"redrive", "--broker", "sqs", "--dlq", "q"}, "--broker must be rabbitmq, jetstream or kafka"},
		{[]string{"redrive", "--broker", "rabbitmq"}, "--dlq is required"},
		{[]string{"redrive", "--broker", "kafka", "--dlq", "t"}, "--brokers is required"},
		{append(base, "--rate", "0"), "--rate"},
		{append(base, "--rate", "-3"), "must be in (0"},
		{append(base, "--rate", "NaN"), "want a number"},
		{append(base, "--rate", "+Inf"), "want a number"},
		{append(base, "--rate", "true"), "want a number"},
		{append(base, "--rate", "2e6"), "must be in (0"},
		{append(base, "--burst", "0"), "--burst"},
		{append(base, "--limit", "-1"), "--limit"},
		{append(base, "--min-age", "-1s"), "must be >= 0"},
		{append(base, "--min-age", "1h", "--max-age", "1m"), "--max-age must be above --min-age"},
		{append(base, "--reason", "a b"), "--reason"},
		{append(base, "--subject", "x.>"), "--subject does not apply to --broker rabbitmq"},
		{append(base, "--group", "g"), "--group does not apply"},
		{[]string{"redrive", "--broker", "kafka", "--dlq", "t", "--brokers", "localhost"}, "want host:port"},
		{[]string{"redrive", "--broker", "kafka", "--dlq", "t", "--brokers", "h:99999"}, "port must be in"},
		{append(base, "--nope"), "unknown flag --nope"},
		{append(base, "extra"), "unexpected argument"},
	} {
		code, out, errOut := runBrokerCLI(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, errOut, out, c.want)
		}
	}
}

// TestBrokerRedriveUnreachable: a failed run exits 1 and never prints the
// URL's password.
func TestBrokerRedriveUnreachable(t *testing.T) {
	for _, args := range [][]string{
		{"--broker", "rabbitmq", "--url", "amqp://guest:s3cretpw@127.0.0.1:1/"},
		{"--broker", "jetstream", "--url", "nats://guest:s3cretpw@127.0.0.1:1"},
	} {
		code, out, errOut := runBrokerCLI(append([]string{"redrive", "--dlq", "q"}, args...)...)
		if code != 1 || errOut == "" {
			t.Errorf("%v: exit %d (stderr %q), want 1 with an error", args, code, errOut)
		}
		if strings.Contains(out+errOut, "s3cretpw") {
			t.Errorf("%v: the password was printed:\n%s%s", args, out, errOut)
		}
	}
}

func amqpTestURL() string {
	if u := os.Getenv("STAGGER_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// rabbitQueues connects to RabbitMQ (skipping the test when it is
// unreachable, failing under CI=true) and declares a queue and its DLQ,
// NAME and NAME.dlq, deleted at the end of the test; the channel is in
// confirm mode.
func rabbitQueues(t *testing.T, prefix string) (*amqp.Channel, string) {
	t.Helper()
	conn, err := amqp.DialConfig(amqpTestURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		serviceUnavailable(t, fmt.Sprintf("RabbitMQ unreachable at STAGGER_AMQP_URL: %v", err))
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	for _, q := range []string{name, name + ".dlq"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ch.QueueDelete(q, false, false, false) })
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch, name
}

// rabbitCount is how many messages queue q holds.
func rabbitCount(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Messages
}

func serviceUnavailable(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func natsTestURL() string {
	if u := os.Getenv("STAGGER_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// jetStreamStreams connects to NATS (skipping the test when it or
// JetStream is unreachable, failing under CI=true) and creates a work
// stream NAME on NAME.in and its DLQ stream NAME_DLQ on dlq.NAME.>, deleted
// at the end of the test.
func jetStreamStreams(t *testing.T, prefix string) (u string, js jetstream.JetStream, work, dlq jetstream.Stream, name string) {
	t.Helper()
	u = natsTestURL()
	nc, err := nats.Connect(u, nats.Timeout(3*time.Second))
	if err != nil {
		serviceUnavailable(t, fmt.Sprintf("NATS unreachable at STAGGER_NATS_URL: %v", err))
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	name = fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	if work, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".in"}}); err != nil {
		serviceUnavailable(t, fmt.Sprintf("JetStream unavailable: %v", err))
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	if dlq, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{"dlq." + name + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name+"_DLQ") })
	return u, js, work, dlq, name
}

// TestBrokerRedriveRabbitMQ redrives a dead letter from a real RabbitMQ
// DLQ queue back to its origin queue (default exchange): a dry run first,
// which moves nothing, then the move.
func TestBrokerRedriveRabbitMQ(t *testing.T) {
	ch, name := rabbitQueues(t, "stg-cli-redrive")
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", name+".dlq", false, false, amqp.Publishing{
		MessageId: "order-7", Body: []byte("payload"), DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"x-stagger-reason": "permanent", "x-stagger-attempt": "1", "x-stagger-exchange": "",
			"x-stagger-routing-key": name, "x-stagger-origin": "/" + name, "x-stagger-first-failure": fmt.Sprint(time.Now().Add(-time.Hour).UnixMilli())},
	})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish the dead letter: %v", err)
	}
	count := func(q string) int { return rabbitCount(t, ch, q) }
	args := []string{"redrive", "--broker", "rabbitmq", "--url", amqpTestURL(), "--dlq", name + ".dlq", "--reason", "permanent", "--min-age", "30m"}
	code, out, errOut := runBrokerCLI(append(args, "--dry-run")...)
	if code != 0 || !strings.Contains(out, `would move "order-7"  reason=permanent attempts=1`) || !strings.Contains(out, "-> /"+name) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if count(name+".dlq") != 1 || count(name) != 0 {
		t.Fatalf("the dry run moved something")
	}
	code, out, errOut = runBrokerCLI(args...)
	if code != 0 || !strings.Contains(out, "read 1, matched 1, moved 1") {
		t.Fatalf("redrive: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "guest:guest") {
		t.Errorf("the URL's password was printed")
	}
	if count(name+".dlq") != 0 || count(name) != 1 {
		t.Fatalf("after the redrive: DLQ %d, origin %d; want 0 and 1", count(name+".dlq"), count(name))
	}
	d, ok, err := ch.Get(name, true)
	if err != nil || !ok || string(d.Body) != "payload" || d.MessageId != "order-7" {
		t.Fatalf("redriven message %+v %v %v", d, ok, err)
	}
	if _, has := d.Headers["x-stagger-reason"]; has {
		t.Errorf("the redriven message still carries its dead-letter reason: %v", d.Headers)
	}
}

// TestBrokerRedriveJetStream redrives a dead letter from a real JetStream
// DLQ stream back to its origin subject.
func TestBrokerRedriveJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, js, work, dlq, name := jetStreamStreams(t, "stg-cli-redrive")
	m := nats.NewMsg("dlq." + name + ".work.1.1")
	m.Data = []byte("payload")
	for k, v := range map[string]string{"x-stagger-reason": "exhausted", "x-stagger-attempt": "3", "x-stagger-origin": name + ".in",
		"x-stagger-id": "order-9", "x-stagger-stream": name, "x-stagger-stream-seq": "1"} {
		m.Header.Set(k, v)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBrokerCLI("redrive", "--broker", "jetstream", "--url", u, "--dlq", name+"_DLQ", "--reason", "exhausted")
	if code != 0 || !strings.Contains(out, `moved "order-9"  reason=exhausted attempts=3`) || !strings.Contains(out, "moved 1") {
		t.Fatalf("redrive: exit %d\n%s%s", code, out, errOut)
	}
	for s, want := range map[jetstream.Stream]uint64{work: 1, dlq: 0} {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Errorf("stream %s holds %d messages after the redrive, want %d", info.Config.Name, info.State.Msgs, want)
		}
	}
	raw, err := work.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw.Data) != "payload" || raw.Header.Get("x-stagger-id") != "order-9" || raw.Header.Get("x-stagger-reason") != "" {
		t.Errorf("redriven message: %q headers %v", raw.Data, raw.Header)
	}
}
