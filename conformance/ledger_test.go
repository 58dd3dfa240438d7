package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	stagjs "github.com/staggerhq/stagger/broker/jetstream"
	"github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/broker/rabbitmq"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/sqlite"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// The drivers a logical request crosses, in the order of the full chain.
const (
	hopHTTP   = "http"
	hopQueue  = "queue"
	hopRabbit = "rabbitmq"
	hopJS     = "jetstream"
	hopKafka  = "kafka"
	hopGRPC   = "grpc"
)

var hops = []string{hopHTTP, hopQueue, hopRabbit, hopJS, hopKafka, hopGRPC}

// The logical request's ledger: a budget of 5 attempts and a 20 s deadline.
const (
	budget   = 5
	lifetime = 20 * time.Second
	// own is every hop's own attempt bound: above the ledger's budget, as
	// the queue's default of 10 is, so only the ledger can keep the sum
	// at 5.
	own = 10
)

// tick is every schedule's wait: the test runs in real time on real
// servers, so the waits are tiny rather than virtual.
var tick = backoff.Constant(time.Millisecond)

// seen is one attempt as its handler saw it.
type seen struct {
	hop      string
	attempt  int
	max      int
	deadline time.Time
}

// flow is one logical request: the drivers it goes through and, for each,
// the local attempt at which its handler hands the work to the next one.
type flow struct {
	name      string
	route     []string
	handoffAt int
	deadline  time.Time

	mu     sync.Mutex
	seen   []seen
	local  map[string]int
	done   map[string]bool // hops whose driver is done with the work
	gaveUp []ending        // the give-ups reported
	end    chan struct{}   // closed when the flow ended (ended)
	closed bool
}

// ending is a hop's give-up, as its driver reported it: a dead letter, a
// dead job, a client call that returned a failure.
type ending struct {
	hop      string
	attempts int    // as the driver counted them; -1: the driver does not say
	reason   string // "" when the driver does not say
}

// finish records that hop's driver is done with f's work — it succeeded
// after handing the work on, or gave up (e) — and ends f when every hop
// that made an attempt is done and one gave up. Every attempt a hop makes
// is recorded before its driver reports the hop done (the handler runs
// first), so when f ends, no driver has an attempt of f left to make but
// by redelivering settled work (the adapters' own suites check that
// nothing runs after a dead letter).
func (f *flow) finish(hop string, e *ending) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done[hop] = true
	if e != nil {
		f.gaveUp = append(f.gaveUp, *e)
	}
	if f.closed || len(f.gaveUp) == 0 {
		return
	}
	for h := range f.local {
		if !f.done[h] {
			return
		}
	}
	f.closed = true
	close(f.end)
}

func (f *flow) record(hop string, d retry.Delivery) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, seen{hop: hop, attempt: d.Attempt, max: d.MaxAttempts, deadline: d.Deadline})
	f.local[hop]++
	return f.local[hop]
}

func (f *flow) doneHops() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.done)
}

func (f *flow) snapshot() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// lab is one server of every kind on loopback, each running the same
// handler: it fails every attempt, and on its flow's handoffAt-th local
// attempt hands the work to the next driver of the flow (with the
// publishing helper each driver offers, passing the handler's context)
// and succeeds.
type lab struct {
	t     *testing.T
	mu    sync.Mutex
	flows map[string]*flow

	httpURL    string
	httpFirst  *http.Client // a caller that starts the work: MaxAttempts = the budget
	httpNext   *http.Client // a call that carries it on: its own bound
	q          *queue.Queue
	rabbit     *rabbitmq.Publisher
	js         jetstream.JetStream
	jsSubject  string
	kcl        *kgo.Client
	ktopic     string
	grpcFirst  healthpb.HealthClient
	grpcNext   healthpb.HealthClient
	errFailing error
}

func (l *lab) flow(name string) *flow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flows[name]
}

// finish reports, for the work named name, that hop's driver is done
// with it (finish).
func (l *lab) finish(name, hop string, e *ending) {
	if f := l.flow(name); f != nil {
		f.finish(hop, e)
	}
}

// handleDone is handle for a broker's consumer: a success is the hop's
// end (a give-up is its dead letter, which the DLQ's reader reports).
func (l *lab) handleDone(ctx context.Context, hop, name string) error {
	err := l.handle(ctx, hop, name)
	if err == nil {
		l.finish(name, hop, nil)
	}
	return err
}

// called reports the end of a client call to hop (HTTP, gRPC) for f: ok,
// or a give-up of the attempts it made; a call that made none was refused
// (the work had no attempt left), a give-up of no attempt.
func (l *lab) called(f *flow, hop string, ok bool) {
	f.mu.Lock()
	ran := f.local[hop] > 0
	f.mu.Unlock()
	if !ran {
		if !ok {
			f.finish(hop+" (refused)", &ending{hop: hop + " (refused)", attempts: 0})
		}
		return
	}
	if ok {
		f.finish(hop, nil)
		return
	}
	f.finish(hop, &ending{hop: hop, attempts: -1})
}

// handle is every driver's handler for the work named name.
func (l *lab) handle(ctx context.Context, hop, name string) error {
	f := l.flow(name)
	if f == nil {
		return retry.Permanent(fmt.Errorf("unknown flow %q", name))
	}
	d, ok := retry.DeliveryFrom(ctx)
	if !ok {
		l.t.Errorf("%s: %s's handler has no Delivery", name, hop)
	}
	local := f.record(hop, d)
	if i := slices.Index(f.route, hop); local == f.handoffAt && i+1 < len(f.route) {
		if err := l.handoff(ctx, f, f.route[i+1]); err == nil {
			return nil
		}
	}
	return retry.Retryable(l.errFailing)
}

// handoff hands f's work to the driver next, from a handler's context.
func (l *lab) handoff(ctx context.Context, f *flow, next string) error {
	d, _ := retry.DeliveryFrom(ctx)
	switch next {
	case hopHTTP:
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.httpURL+"/"+f.name, nil)
		resp, err := l.httpNext.Do(req)
		if err != nil {
			l.called(f, hopHTTP, false)
			return err
		}
		resp.Body.Close()
		l.called(f, hopHTTP, resp.StatusCode < 300)
		return nil
	case hopQueue:
		j, err := queue.Handoff(d, queue.NewJob{ID: "job-" + f.name, Payload: []byte(f.name)})
		if err != nil {
			return err
		}
		_, _, err = l.q.Enqueue(ctx, j)
		return err
	case hopRabbit:
		return l.rabbit.Publish(ctx, f.name, []byte(f.name))
	case hopJS:
		_, err := stagjs.Publish(ctx, l.js, l.jsSubject, f.name, []byte(f.name))
		return err
	case hopKafka:
		return kafka.Publish(ctx, l.kcl, l.ktopic, f.name, nil, []byte(f.name))
	case hopGRPC:
		_, err := l.grpcNext.Check(ctx, &healthpb.HealthCheckRequest{Service: f.name})
		l.called(f, hopGRPC, err == nil)
		if status.Code(err) == codes.Unavailable {
			return nil // the hop ran, and failed as every hop does
		}
		return err
	}
	return fmt.Errorf("unknown hop %q", next)
}

// start makes the first attempt of f's work on its first driver, with
// the ledger's budget and deadline.
func (l *lab) start(f *flow) error {
	ctx, cancel := context.WithDeadline(context.Background(), f.deadline)
	defer cancel()
	work := retry.Delivery{ID: f.name, MaxAttempts: budget, Deadline: f.deadline, Source: "retry"}.NewContext(context.Background())
	switch f.route[0] {
	case hopHTTP:
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.httpURL+"/"+f.name, nil)
		resp, err := l.httpFirst.Do(req)
		if err != nil {
			l.called(f, hopHTTP, false)
			return err
		}
		resp.Body.Close()
		l.called(f, hopHTTP, resp.StatusCode < 300)
		return nil
	case hopQueue:
		_, _, err := l.q.Enqueue(ctx, queue.NewJob{ID: "job-" + f.name, Payload: []byte(f.name), MaxAttempts: budget, Deadline: f.deadline.UnixMilli()})
		return err
	case hopRabbit:
		return l.rabbit.Publish(work, f.name, []byte(f.name))
	case hopJS:
		_, err := stagjs.Publish(work, l.js, l.jsSubject, f.name, []byte(f.name))
		return err
	case hopKafka:
		return kafka.Publish(work, l.kcl, l.ktopic, f.name, nil, []byte(f.name))
	case hopGRPC:
		_, err := l.grpcFirst.Check(ctx, &healthpb.HealthCheckRequest{Service: f.name})
		l.called(f, hopGRPC, err == nil)
		if status.Code(err) == codes.Unavailable || err == nil {
			return nil
		}
		return err
	}
	return fmt.Errorf("unknown hop %q", f.route[0])
}

// unavailable skips the test when a server is not running, except under
// CI=true, where it fails.
func unavailable(t *testing.T, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s unreachable: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func newLab(t *testing.T) *lab {
	l := &lab{t: t, flows: map[string]*flow{}, errFailing: errors.New("the dependency is down")}
	unique := fmt.Sprintf("stg-ledger-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	consumer := &retry.Policy{MaxAttempts: own, Schedule: tick}

	// RabbitMQ.
	conn, amqpURL, topo := rabbitTopology(t, unique, broker.Tiers{10 * time.Millisecond, 100 * time.Millisecond})
	var err error
	if l.rabbit, err = rabbitmq.NewPublisher(conn, topo); err != nil {
		t.Fatal(err)
	}
	rc, err := rabbitmq.NewConsumer(rabbitmq.Options{URL: amqpURL, Topology: topo, Policy: consumer,
		Handler: func(ctx context.Context, p []byte) error { return l.handleDone(ctx, hopRabbit, string(p)) }})
	if err != nil {
		t.Fatal(err)
	}
	run(t, rc.Run)
	dch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dls, err := dch.Consume(topo.DLQ, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range dls {
			l.deadLetter(hopRabbit, d.Body)(rabbitmq.ParseDeadLetter(d))
		}
	}()

	// NATS JetStream.
	stream := strings.ReplaceAll(unique, "-", "_")
	l.js, l.jsSubject = natsStream(t, ctx, stream)
	jc, err := stagjs.NewConsumer(l.js, stagjs.Options{Stream: stream, Consumer: "work", Policy: consumer, AckWait: 5 * time.Second,
		Handler: func(ctx context.Context, p []byte) error { return l.handleDone(ctx, hopJS, string(p)) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := jc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, jc.Run)
	jdlq, err := l.js.OrderedConsumer(ctx, stream+"_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	jcc, err := jdlq.Consume(func(m jetstream.Msg) { l.deadLetter(hopJS, m.Data())(stagjs.ParseDeadLetter(m)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jcc.Stop)

	// Kafka: franz-go's in-process kfake cluster.
	addrs, topics, kcl := kfakeTopics(t, unique, broker.Tiers{10 * time.Millisecond, 100 * time.Millisecond})
	l.ktopic, l.kcl = topics.Main, kcl
	kc, err := kafka.NewConsumer(kafka.Options{Brokers: addrs, Topics: topics, Group: unique, Policy: consumer,
		Handler: func(ctx context.Context, p []byte) error { return l.handleDone(ctx, hopKafka, string(p)) }})
	if err != nil {
		t.Fatal(err)
	}
	run(t, kc.Run)
	kdlq, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, func(ctx context.Context) error {
		defer kdlq.Close()
		for ctx.Err() == nil {
			kdlq.PollFetches(ctx).EachRecord(func(r *kgo.Record) { l.deadLetter(hopKafka, r.Value)(kafka.ParseDeadLetter(r)) })
		}
		return ctx.Err()
	})

	// The queue, on SQLite.
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if l.q, err = queue.New(st, queue.Config{Policy: consumer}); err != nil {
		t.Fatal(err)
	}
	run(t, func(ctx context.Context) error {
		h := func(ctx context.Context, p []byte) error { return l.handle(ctx, hopQueue, string(p)) }
		for ctx.Err() == nil {
			j, err := l.q.RunOnce(ctx, h)
			switch {
			case j == nil && err == nil:
				time.Sleep(time.Millisecond)
			case j != nil && j.State == queue.Done:
				l.finish(string(j.Payload), hopQueue, nil)
			case j != nil && j.State == queue.Dead:
				l.finish(string(j.Payload), hopQueue, &ending{hop: hopQueue, attempts: j.Attempts, reason: string(j.DeadReason)})
			}
		}
		return ctx.Err()
	})

	// HTTP: a Guard-ed service.
	srv := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := l.handle(r.Context(), hopHTTP, strings.TrimPrefix(r.URL.Path, "/")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})})
	t.Cleanup(srv.Close)
	l.httpURL = srv.URL
	l.httpFirst = &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: budget, Schedule: tick})}
	l.httpNext = &http.Client{Transport: retryhttp.New(nil, consumer)}

	// gRPC: a service behind the Server interceptors.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := &staggergrpc.Server{}
	gsrv := grpc.NewServer(grpc.ChainUnaryInterceptor(gs.Unary()))
	healthpb.RegisterHealthServer(gsrv, &healthFn{check: func(ctx context.Context, name string) error {
		if err := l.handle(ctx, hopGRPC, name); err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
		return nil
	}})
	go gsrv.Serve(lis)
	t.Cleanup(gsrv.Stop)
	dialGRPC := func(p *retry.Policy) healthpb.HealthClient {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor((&staggergrpc.Client{Policy: p}).Unary()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	l.grpcFirst = dialGRPC(&retry.Policy{MaxAttempts: budget, Schedule: tick})
	l.grpcNext = dialGRPC(consumer)
	return l
}

// deadLetter returns what reports a broker's dead letter of the work
// named by body as hop's give-up.
func (l *lab) deadLetter(hop string, body []byte) func(broker.DeadLetter, error) {
	return func(dl broker.DeadLetter, err error) {
		if err != nil {
			l.t.Errorf("%s: a dead letter of %q does not parse: %v", hop, body, err)
			return
		}
		l.finish(string(body), hop, &ending{hop: hop, attempts: dl.Attempts, reason: dl.Reason})
	}
}

// run runs a driver's loop until the test ends.
func run(t *testing.T, loop func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("a driver's loop returned %v", err)
		}
	})
}

type healthFn struct {
	healthpb.UnimplementedHealthServer
	check func(ctx context.Context, name string) error
}

func (h *healthFn) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.check(ctx, req.Service); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestLedgerAcrossDrivers: one logical request with a budget of 5
// attempts and a 20 s deadline, failing everywhere, handed from each
// driver to each other one (after its second attempt), and along the full
// chain HTTP → queue → RabbitMQ → JetStream → Kafka → gRPC and back
// (after each driver's first attempt): the sum of the attempts every hop
// made is 5, the attempt numbers run 1 … 5 without going back, every hop
// sees the budget of 5, and the deadline never grows.
func TestLedgerAcrossDrivers(t *testing.T) {
	l := newLab(t)
	var flows []*flow
	add := func(name string, route []string, at int) {
		f := &flow{name: name, route: route, handoffAt: at, deadline: time.Now().Add(lifetime).Truncate(time.Millisecond),
			local: map[string]int{}, done: map[string]bool{}, end: make(chan struct{})}
		l.mu.Lock()
		l.flows[name] = f
		l.mu.Unlock()
		flows = append(flows, f)
	}
	for _, a := range hops {
		for _, b := range hops {
			if a != b {
				add(a+"-to-"+b, []string{a, b}, 2)
			}
		}
	}
	add("chain", hops, 1)
	back := slices.Clone(hops)
	slices.Reverse(back)
	add("chain-back", back, 1)
	var wg sync.WaitGroup
	for _, f := range flows {
		wg.Go(func() {
			if err := l.start(f); err != nil {
				t.Errorf("%s: start: %v", f.name, err)
			}
		})
	}
	wg.Wait()
	// Wait for every flow to end: each hop that made an attempt reported
	// its driver done with the work (a success after its hand-off, a dead
	// letter, a dead job, a client call's failure) and one gave up. An
	// attempt beyond the budget comes before the give-up that ends its
	// hop, so it is in the count whatever the machine's speed.
	limit := time.NewTimer(time.Minute) // bounds a hung test only
	defer limit.Stop()
	for _, f := range flows {
		select {
		case <-f.end:
		case <-limit.C:
			t.Fatalf("%s did not end: attempts%s, hops done %v, give-ups %v", f.name, describe(f.snapshot()), f.doneHops(), f.gaveUp)
		}
	}
	for _, f := range flows {
		check(t, f)
	}
}

// slack is how much later than the previous one a hop's deadline may
// read. Queue rows and broker headers carry the deadline itself, in Unix
// milliseconds: a millisecond. HTTP (Stagger-Timeout-Ms) and gRPC
// (grpc-timeout) carry the time left, so that the two clocks need not
// agree, and the receiver counts it from the request's arrival: the
// deadline reads later by the request's time in transit (tens of
// milliseconds on a loaded machine), never by more than that — a second
// here, where a deadline started over would read 20 s or the queue's
// default of hours.
func slack(hop string) time.Duration {
	if hop == hopHTTP || hop == hopGRPC {
		return time.Second
	}
	return time.Millisecond
}

// describe lists attempts as hop:attempt/budget.
func describe(got []seen) string {
	var b strings.Builder
	for _, s := range got {
		fmt.Fprintf(&b, " %s:%d/%d", s.hop, s.attempt, s.max)
	}
	return b.String()
}

func check(t *testing.T, f *flow) {
	t.Helper()
	got := f.snapshot()
	var nums []int
	for _, s := range got {
		nums = append(nums, s.attempt)
	}
	if len(got) != budget || !slices.Equal(nums, []int{1, 2, 3, 4, 5}) {
		t.Errorf("%s: attempts%s; want 5 attempts numbered 1 … 5 in all", f.name, describe(got))
	}
	f.mu.Lock()
	gaveUp := slices.Clone(f.gaveUp)
	f.mu.Unlock()
	// The work ends with the give-up of the hop that made attempt 5, or
	// with a hand-off refused for want of an attempt (the client sent
	// nothing), or both: the refusal failed the hop's last attempt.
	var ran, refused []ending
	for _, e := range gaveUp {
		if e.attempts == 0 {
			refused = append(refused, e)
		} else {
			ran = append(ran, e)
		}
	}
	if len(ran) > 1 || len(refused) > 1 || len(gaveUp) == 0 {
		t.Errorf("%s: give-ups %+v, want the one of the hop that made attempt 5 or a refused hand-off", f.name, gaveUp)
	}
	for _, e := range ran {
		if (len(got) > 0 && e.hop != got[len(got)-1].hop) || (e.attempts != -1 && e.attempts != budget) ||
			(e.reason != "" && e.reason != retry.Exhausted.String()) {
			t.Errorf("%s: give-up %+v, want the last hop's, exhausted after %d attempts", f.name, e, budget)
		}
	}
	prev := f.deadline
	for i, s := range got {
		if s.max != budget {
			t.Errorf("%s: attempt %d on %s saw a budget of %d, want %d", f.name, i+1, s.hop, s.max, budget)
		}
		switch {
		case s.deadline.IsZero():
			t.Errorf("%s: attempt %d on %s has no deadline, want the work's", f.name, i+1, s.hop)
		case s.deadline.After(prev.Add(slack(s.hop))):
			t.Errorf("%s: attempt %d on %s has deadline %v, later than %v before it", f.name, i+1, s.hop, s.deadline, prev)
		default:
			prev = s.deadline
		}
	}
	if len(f.route) == 2 {
		want := []string{f.route[0], f.route[0], f.route[1], f.route[1], f.route[1]}
		var hopsSeen []string
		for _, s := range got {
			hopsSeen = append(hopsSeen, s.hop)
		}
		if !slices.Equal(hopsSeen, want) {
			t.Errorf("%s: hops %v, want %v (two attempts, then what is left)", f.name, hopsSeen, want)
		}
	}
}
