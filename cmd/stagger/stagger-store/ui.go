package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/ui"
)

func init() {
	register(command{Name: "ui", Summary: "the dashboard: queues, jobs, dead letters, a proxy's counts", Run: runUI})
}

const uiHelp = `Usage: stagger ui [--db FILE|URL] [--listen ADDR] [--read-only] [--proxy URL]
                 [--dlq KIND:NAME ... --amqp URL|--nats URL|--kafka SEEDS] [--basic-auth-file FILE]

Serves the dashboard (package ui) until stopped: the queues of the store
(counts by state, finished per second, lag, paused or not, live), a job
search, each job with its history and actions (cancel, requeue, pause and
resume its queue), the dead jobs and the brokers' dead letters in one list
with a paced redrive and a dry run, and, with --proxy, a running stagger
proxy's counts. --read-only refuses every action. Every action needs the
page's CSRF token and comes from the page's own origin.

It binds 127.0.0.1 by default. With --basic-auth-file (a file holding
user:password on its first line) or $STAGGER_UI_BASIC_AUTH (user:password)
every request needs those credentials; they are never printed.

Examples:
  stagger ui --db ./jobs.db
  stagger ui --db 'postgres://app@db/app' --read-only --listen 127.0.0.1:9090
  stagger ui --db ./jobs.db --dlq rabbitmq:orders.dlq --proxy http://127.0.0.1:8474

Flags:
`

type uiFlags struct {
	fs                *flag.FlagSet
	db, listen, proxy string
	readOnly          bool
	dlqs              []string
	amqp, nats        string
	kafka             []string
	authFile          string
	interval          time.Duration
}

func newUIFlags() *uiFlags {
	f := &uiFlags{fs: flag.NewFlagSet("stagger ui", flag.ContinueOnError), interval: time.Second}
	fs := f.fs
	fs.StringVar(&f.db, "db", "./stagger.db", "the queue's store: an SQLite file (a plain path; it must exist), or a postgres:// URL or key=value connection string")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8082", "the address to serve on")
	fs.BoolVar(&f.readOnly, "read-only", false, "refuse every action (the store is opened read-only too)")
	fs.StringVar(&f.proxy, "proxy", "", "a running stagger proxy's control API (http://127.0.0.1:8474): adds the proxy page")
	fs.Var(&listValue{P: &f.dlqs, Check: checkDLQ}, "dlq", "a broker DLQ to list and redrive: rabbitmq:QUEUE, jetstream:STREAM or kafka:TOPIC; comma-separated or repeated")
	fs.StringVar(&f.amqp, "amqp", "", "the AMQP URL of the rabbitmq: DLQs (default $STAGGER_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/); a password in it is never printed")
	fs.StringVar(&f.nats, "nats", "", "the NATS URL of the jetstream: DLQs (default $STAGGER_NATS_URL, else nats://127.0.0.1:4222)")
	fs.Var(&listValue{P: &f.kafka, Check: checkHostPort}, "kafka", "the Kafka seed brokers of the kafka: DLQs, host:port, comma-separated or repeated")
	fs.StringVar(&f.authFile, "basic-auth-file", "", "a file whose first line is user:password: every request needs them (HTTP Basic); default $STAGGER_UI_BASIC_AUTH")
	fs.Var(durationValue{P: &f.interval, Positive: true, Max: time.Hour}, "interval", "how often the counts are read")
	return f
}

func checkDLQ(s string) error {
	kind, name, ok := strings.Cut(s, ":")
	if !ok || name == "" {
		return fmt.Errorf("want KIND:NAME (rabbitmq:orders.dlq, jetstream:ORDERS_DLQ, kafka:orders-dlq), got %q", redact.String(s))
	}
	switch kind {
	case "rabbitmq", "jetstream", "kafka":
	default:
		return fmt.Errorf("the kind must be rabbitmq, jetstream or kafka, got %q", redact.String(kind))
	}
	if len(name) > 255 || strings.ContainsAny(name, " \t\r\n") {
		return fmt.Errorf("%s: a DLQ name is 1 to 255 bytes without spaces", kind)
	}
	return nil
}

func (f *uiFlags) check() error {
	if _, err := classifyDB(f.db); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return fmt.Errorf("--listen must be host:port, such as 127.0.0.1:8082, got %q", redact.String(f.listen))
	}
	if f.proxy != "" {
		u, err := url.Parse(f.proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("--proxy must be an http:// URL of a proxy's control API, such as http://127.0.0.1:8474")
		}
	}
	kinds := map[string]bool{}
	for _, d := range f.dlqs {
		k, _, _ := strings.Cut(d, ":")
		kinds[k] = true
	}
	if kinds["kafka"] && len(f.kafka) == 0 {
		return errors.New("--kafka is required with a kafka: --dlq (the seed brokers)")
	}
	for _, c := range []struct{ flag, kind string }{{"amqp", "rabbitmq"}, {"nats", "jetstream"}, {"kafka", "kafka"}} {
		if flagWasSet(f.fs, c.flag) && !kinds[c.kind] {
			return fmt.Errorf("--%s is given but no --dlq %s:NAME", c.flag, c.kind)
		}
	}
	for _, u := range []struct{ flag, v string }{{"--amqp", f.amqp}, {"--nats", f.nats}} {
		if u.v != "" {
			if _, err := url.Parse(u.v); err != nil {
				return fmt.Errorf("%s does not parse as a URL", u.flag)
			}
		}
	}
	return nil
}

// basicAuth reads user:password from --basic-auth-file or
// $STAGGER_UI_BASIC_AUTH; "" when neither is set. Errors never hold the
// secret.
func (f *uiFlags) basicAuth() (user, password string, err error) {
	line := ""
	switch {
	case f.authFile != "":
		file, err := os.Open(f.authFile)
		if err != nil {
			return "", "", fmt.Errorf("--basic-auth-file: %w", err)
		}
		defer file.Close()
		sc := bufio.NewScanner(io.LimitReader(file, 4096))
		if sc.Scan() {
			line = strings.TrimRight(sc.Text(), "\r")
		}
		if line == "" {
			return "", "", errors.New("--basic-auth-file: the first line must be user:password, and it is empty")
		}
	case os.Getenv("STAGGER_UI_BASIC_AUTH") != "":
		line = os.Getenv("STAGGER_UI_BASIC_AUTH")
	default:
		return "", "", nil
	}
	user, password, ok := strings.Cut(line, ":")
	if !ok || user == "" || password == "" {
		return "", "", errors.New("basic auth: want user:password with neither empty (the value is not repeated)")
	}
	return user, password, nil
}

func runUI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newUIFlags()
	help := func(w io.Writer) {
		fmt.Fprint(w, uiHelp)
		printFlags(w, f.fs, map[string]string{"db": "FILE|URL", "listen": "ADDR", "proxy": "URL", "dlq": "KIND:NAME", "amqp": "URL", "nats": "URL", "kafka": "SEEDS", "basic-auth-file": "FILE"})
	}
	if code, ok := parseFlags(f.fs, args, stdout, stderr, help); !ok {
		return code
	}
	if err := f.check(); err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	user, password, err := f.basicAuth()
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	mode := openExisting
	if f.readOnly {
		mode = openReadOnly
	}
	store, closeStore, err := openStore(ctx, f.db, storeOptions{sqliteSync: "FULL", mode: mode})
	if err != nil {
		fmt.Fprintf(stderr, "stagger ui: %v\n", redact.Error(err, f.db))
		if errors.Is(err, queue.ErrInvalid) {
			return exitUsage
		}
		return exitFail
	}
	defer closeStore()
	q, err := queue.New(store, queue.Config{})
	if err != nil {
		fmt.Fprintf(stderr, "stagger ui: %v\n", err)
		return exitFail
	}
	cfg := ui.Config{Interval: f.interval, Queues: ui.NewQueues(q), Proxy: f.proxy, ReadOnly: f.readOnly}
	if user != "" {
		cfg.Authorize = ui.BasicAuth(user, password)
	}
	for _, d := range f.dlqs {
		kind, name, _ := strings.Cut(d, ":")
		bf := brokerRedriveFlags{kind: kind, dlq: name, brokers: f.kafka}
		switch kind {
		case "rabbitmq":
			bf.url = f.amqp
		case "jetstream":
			bf.url = f.nats
		}
		cfg.DeadLetters = append(cfg.DeadLetters, ui.BrokerDeadLetters(kind+" "+name,
			func(ctx context.Context) (broker.RedriveSource, func(), error) {
				g := bf // each opening starts from the flags
				src, closeSrc, err := g.open(ctx)
				if err != nil {
					return nil, nil, redact.Error(err, append([]string{f.amqp, f.nats}, f.kafka...)...)
				}
				return src, closeSrc, nil
			}))
	}
	d, err := ui.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "stagger ui: %v\n", err)
		return exitUsage
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "stagger ui: %v\n", err)
		return exitUsage
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Event streams end with runCtx, so a shutdown does not wait for them.
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return runCtx }}
	go d.Run(runCtx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	mode2 := ""
	if f.readOnly {
		mode2 = " (read-only)"
	}
	fmt.Fprintf(stdout, "stagger ui: serving http://%s/%s\n", ln.Addr(), mode2)
	if host, _, _ := net.SplitHostPort(f.listen); user == "" && !isLoopback(host) {
		fmt.Fprintln(stderr, "stagger ui: warning: listening beyond loopback without --basic-auth-file: anyone who reaches the port can act on the queue")
	}
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "stagger ui: %v\n", err)
		return exitFail
	case <-ctx.Done():
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	return exitOK
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
