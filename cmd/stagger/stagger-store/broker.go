package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	sjetstream "github.com/staggerhq/stagger/broker/jetstream"
	skafka "github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/broker/rabbitmq"
	"github.com/staggerhq/stagger/internal/redact"
)

func init() {
	register(command{Name: "broker", Summary: "broker dead letters: redrive (move them back, paced)", Run: runBroker})
}

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprintln(w, "Usage: stagger broker <subcommand> [flags]   (--help for its flags)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "  redrive   move dead letters back to their origin, filtered and paced")
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] != "redrive" {
		fmt.Fprintf(stderr, "stagger broker: unknown subcommand %q\n", redact.String(args[0]))
		return exitUsage
	}
	return brokerRedrive(ctx, args[1:], stdout, stderr)
}

// brokerRedriveFlags are the flags of stagger broker redrive.
type brokerRedriveFlags struct {
	fs                *flag.FlagSet
	kind              string
	url               string
	brokers           []string
	dlq, subject      string
	group             string
	reasons           []string
	minAge, maxAge    time.Duration
	rate              float64
	burst, limit      int
	dryRun, keepState bool
	timeout           time.Duration
}

const redriveHelp = `Usage: stagger broker redrive --broker rabbitmq|jetstream|kafka --dlq NAME [flags]

Moves dead letters back to where they came from (their x-stagger-origin):
a RabbitMQ DLQ queue to the original exchange and routing key, a JetStream
DLQ stream to the original subject, a Kafka DLQ topic to the original topic.
Each move is a republish the broker confirmed, then the removal from the DLQ
(Kafka: the --group's committed offset), so a crash in between duplicates a
message and never loses one. Moves are paced by --rate and --burst, so the
dependency that just recovered sees a ramp, not the whole DLQ at once.

Prints one line per matching dead letter and a summary. Exits 0 when the run
completed, 1 when it failed (nothing more is moved; what moved stays moved),
2 for bad flags.

Examples:
  stagger broker redrive --broker rabbitmq --dlq orders.dlq --reason permanent --dry-run
  stagger broker redrive --broker jetstream --dlq ORDERS_DLQ --min-age 10m --rate 5
  stagger broker redrive --broker kafka --brokers 127.0.0.1:9092 --dlq orders-dlq --limit 100

Flags:
`

func newRedriveFlags() *brokerRedriveFlags {
	f := &brokerRedriveFlags{fs: flag.NewFlagSet("stagger broker redrive", flag.ContinueOnError)}
	fs := f.fs
	fs.StringVar(&f.kind, "broker", "", "the broker: rabbitmq, jetstream or kafka (required)")
	fs.StringVar(&f.url, "url", "", "rabbitmq: the AMQP URL (default $STAGGER_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/); jetstream: the NATS URL (default $STAGGER_NATS_URL, else nats://127.0.0.1:4222). A password in it is never printed")
	fs.Var(&listValue{P: &f.brokers, Check: checkHostPort}, "brokers", "kafka: seed brokers, host:port, comma-separated or repeated (required for kafka)")
	fs.StringVar(&f.dlq, "dlq", "", "the DLQ: a RabbitMQ queue, a JetStream stream, a Kafka topic (required)")
	fs.StringVar(&f.subject, "subject", "", "jetstream: only dead letters on subjects matching this filter (default: all)")
	fs.StringVar(&f.group, "group", "", "kafka: the consumer group that records how far the DLQ was redriven (default <dlq>-redrive)")
	fs.Var(&listValue{P: &f.reasons, Check: checkReason}, "reason", "only dead letters with this reason (permanent, exhausted, unknown, deadline, budget, malformed, max_deliveries …); comma-separated or repeated (default: all)")
	fs.Var(durationValue{P: &f.minAge, Max: 100 * 365 * 24 * time.Hour}, "min-age", "only dead letters that first failed at least this long ago (0: no bound)")
	fs.Var(durationValue{P: &f.maxAge, Max: 100 * 365 * 24 * time.Hour}, "max-age", "only dead letters that first failed less than this long ago (0: no bound)")
	f.rate = 10
	fs.Var(rateValue{&f.rate}, "rate", "the most republishes per second, in (0, 1e6]")
	f.burst = 1
	fs.Var(intValue{P: &f.burst, Min: 1, Max: 1_000_000}, "burst", "republishes that may go at once before --rate applies")
	fs.Var(intValue{P: &f.limit, Min: 0, Max: math.MaxInt32}, "limit", "stop after this many matching dead letters (0: all)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what would move; move nothing")
	fs.BoolVar(&f.keepState, "keep-state", false, "keep the attempt count and first-failure time (the message gets only the attempts its policy has left); default: reset, the message starts over")
	fs.Var(durationValue{P: &f.timeout, Max: 7 * 24 * time.Hour}, "timeout", "give up the run after this long (0: no limit)")
	return f
}

// rateValue is a finite rate in (0, broker.MaxRedriveRate].
type rateValue struct{ p *float64 }

func (v rateValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v rateValue) Set(s string) error {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
		return errors.New("want a number of messages per second, such as 5 or 0.5")
	}
	if r <= 0 || r > broker.MaxRedriveRate {
		return fmt.Errorf("must be in (0, %g], got %v", broker.MaxRedriveRate, r)
	}
	*v.p = r
	return nil
}

// checkHostPort checks a Kafka seed. A seed with user information
// (user:password@host:port) is refused without being repeated: the client
// would take it for a host name and print it in its errors.
func checkHostPort(s string) error {
	if strings.Contains(s, "@") {
		return errors.New("a seed is host:port: user:password@ is not accepted (SASL credentials do not go in a seed; the value is not repeated)")
	}
	host, port, err := splitHostPort(s)
	if err != nil || host == "" {
		return fmt.Errorf("want host:port, got %q", redact.String(s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be in [1, 65535], got %q", port)
	}
	return nil
}

func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return "", "", errors.New("no port")
	}
	return strings.Trim(s[:i], "[]"), s[i+1:], nil
}

func checkReason(s string) error {
	if s == "" || len(s) > 64 || strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("want a reason name such as permanent, got %q", s)
	}
	return nil
}

func (f *brokerRedriveFlags) check() error {
	switch f.kind {
	case "rabbitmq", "jetstream", "kafka":
	case "":
		return errors.New("--broker is required: rabbitmq, jetstream or kafka")
	default:
		return fmt.Errorf("--broker must be rabbitmq, jetstream or kafka, got %q", f.kind)
	}
	if f.dlq == "" {
		return errors.New("--dlq is required: the DLQ queue, stream or topic")
	}
	if f.kind == "kafka" && len(f.brokers) == 0 {
		return errors.New("--brokers is required with --broker kafka")
	}
	for _, c := range []struct {
		flag string
		ok   bool
	}{{"--brokers", f.kind == "kafka"}, {"--group", f.kind == "kafka"}, {"--subject", f.kind == "jetstream"}, {"--url", f.kind != "kafka"}} {
		if !c.ok && flagWasSet(f.fs, strings.TrimPrefix(c.flag, "--")) {
			return fmt.Errorf("%s does not apply to --broker %s", c.flag, f.kind)
		}
	}
	if f.maxAge > 0 && f.maxAge <= f.minAge {
		return fmt.Errorf("--max-age must be above --min-age (%v), got %v", f.minAge, f.maxAge)
	}
	if f.url != "" {
		if _, err := url.Parse(f.url); err != nil {
			return errors.New("--url does not parse as a URL")
		}
	}
	return nil
}

func brokerRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newRedriveFlags()
	help := func(w io.Writer) {
		fmt.Fprint(w, redriveHelp)
		printFlags(w, f.fs, map[string]string{"broker": "rabbitmq|jetstream|kafka", "rate": "X", "url": "URL", "dlq": "NAME", "reason": "LIST", "subject": "FILTER"})
	}
	if code, ok := parseFlags(f.fs, args, stdout, stderr, help); !ok {
		return code
	}
	if err := f.check(); err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "stagger broker redrive: %v\n", redact.Error(err, append([]string{f.url}, f.brokers...)...))
		return exitFail
	}
	src, closeSrc, err := f.open(ctx)
	if err != nil {
		return fail(err)
	}
	defer closeSrc()
	verb := "moved"
	if f.dryRun {
		verb = "would move"
	}
	opts := broker.RedriveOptions{
		Reasons: f.reasons, MinAge: f.minAge, MaxAge: f.maxAge, Rate: f.rate, Burst: f.burst,
		Limit: f.limit, DryRun: f.dryRun, KeepState: f.keepState,
		Report: func(e broker.RedriveEvent) {
			first := "-"
			if !e.FirstFailure.IsZero() {
				first = e.FirstFailure.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "%s %s  reason=%s attempts=%d first-failure=%s -> %s\n",
				verb, strconv.Quote(e.ID), e.Reason, e.Attempts, first, e.To)
		},
	}
	res, err := broker.Redrive(ctx, src, opts)
	summary := fmt.Sprintf("redrive %s: read %d, matched %d, moved %d", f.dlq, res.Read, res.Matched, res.Moved)
	if res.NoOrigin > 0 {
		summary += fmt.Sprintf(", %d left without an origin", res.NoOrigin)
	}
	if f.dryRun {
		summary += " (dry run: nothing moved)"
	}
	fmt.Fprintln(stdout, summary)
	if err != nil {
		return fail(err)
	}
	return exitOK
}

// open connects to the broker and opens its RedriveSource.
func (f *brokerRedriveFlags) open(ctx context.Context) (broker.RedriveSource, func(), error) {
	switch f.kind {
	case "rabbitmq":
		if f.url == "" {
			f.url = envOr("STAGGER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
		}
		conn, err := amqp.DialConfig(f.url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
		if err != nil {
			return nil, nil, fmt.Errorf("connect to RabbitMQ at %s: %w", redact.String(f.url), err)
		}
		src, err := rabbitmq.NewRedriveSource(conn, f.dlq)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return src, func() { _ = src.Close(); conn.Close() }, nil
	case "jetstream":
		if f.url == "" {
			f.url = envOr("STAGGER_NATS_URL", "nats://127.0.0.1:4222")
		}
		nc, err := nats.Connect(f.url, nats.Timeout(10*time.Second), nats.Name("stagger broker redrive"), nats.NoReconnect())
		if err != nil {
			return nil, nil, fmt.Errorf("connect to NATS at %s: %w", redact.String(f.url), err)
		}
		js, err := jetstream.New(nc)
		if err == nil {
			var src *sjetstream.RedriveSource
			if src, err = sjetstream.NewRedriveSource(ctx, js, f.dlq, f.subject); err == nil {
				return src, nc.Close, nil
			}
		}
		nc.Close()
		return nil, nil, err
	default:
		group := f.group
		if group == "" {
			group = f.dlq + "-redrive"
		}
		// The client retries an unreachable broker for ever: bound the
		// opening reads.
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		src, err := skafka.NewRedriveSource(octx, skafka.RedriveSourceOptions{Brokers: f.brokers, DLQ: f.dlq, Group: group})
		if err != nil {
			return nil, nil, err
		}
		return src, src.Close, nil
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
