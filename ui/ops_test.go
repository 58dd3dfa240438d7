package ui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/uievents"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/ui"
)

const hostileID = `<script>alert(1)</script>"'&<img src=x onerror=alert(2)>`

// fixture is a dashboard on a memory queue with jobs in two queues: two
// pending in "default", one dead (permanent) in "mail", and one whose ID
// and payload are markup.
type fixture struct {
	q   *queue.Queue
	d   *ui.Dashboard
	srv *httptest.Server
	now atomic.Int64
}

func newFixture(t *testing.T, c ui.Config) *fixture {
	t.Helper()
	f := &fixture{}
	f.now.Store(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixMilli())
	store := queue.NewMemoryStore()
	var err error
	f.q, err = queue.New(store, queue.Config{Now: f.now.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, j := range []queue.NewJob{{ID: "order-1", Payload: []byte(`{"n":1}`)}, {ID: "order-2"}, {ID: hostileID, Payload: []byte(hostileID)},
		{ID: "mail-1", Queue: "mail", MaxAttempts: 1, Payload: []byte{0xff, 0xfe, 'x'}}} {
		if _, _, err := f.q.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	mail, err := queue.New(store, queue.Config{Queue: "mail", Now: f.now.Load})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mail.RunOnce(ctx, func(context.Context, []byte) error { return retry.Permanent(errors.New("smtp 550 <b>no</b>")) }); err != nil {
		t.Fatal(err)
	}
	c.Queues = ui.NewQueues(f.q)
	f.d, err = ui.New(c)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(http.StripPrefix("/ops", f.d))
	t.Cleanup(f.srv.Close)
	return f
}

// browser is an HTTP client with cookies, as one browser tab.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t, &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, f.srv.URL + "/ops/"}
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var tokenRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token loads a page and returns the CSRF token of its forms.
func (b *browser) token(page string) string {
	b.t.Helper()
	code, body := b.get(page)
	m := tokenRE.FindStringSubmatch(body)
	if code != 200 || m == nil {
		b.t.Fatalf("GET %s: %d, no CSRF token in %.300s", page, code, body)
	}
	return m[1]
}

func (b *browser) post(form url.Values, hdr ...string) (int, string, string) {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+"act", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
}

func (f *fixture) state(t *testing.T, id string) string {
	j, err := f.q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(j.State) + " " + string(j.DeadReason))
}

func TestQueuesPages(t *testing.T) {
	f := newFixture(t, ui.Config{})
	b := f.browser(t)
	code, body := b.get("queues")
	if code != 200 {
		t.Fatalf("queues: %d %s", code, body)
	}
	for _, want := range []string{`data-queue="default"`, `data-queue="mail"`, `<td data-k="due">3</td>`, `value="pause"`} {
		if !strings.Contains(body, want) {
			t.Errorf("queues page lacks %s", want)
		}
	}
	code, body = b.get("jobs?state=dead")
	if code != 200 || !strings.Contains(body, `href="job?id=mail-1"`) || strings.Contains(body, "order-1") {
		t.Fatalf("jobs?state=dead: %d %s", code, body)
	}
	code, body = b.get("jobs?queue=default&prefix=order-&limit=1")
	if code != 200 || !strings.Contains(body, "order-1") || strings.Contains(body, "order-2") || !strings.Contains(body, `after=order-1`) {
		t.Fatalf("first page: %d %s", code, body)
	}
	code, body = b.get("jobs?queue=default&prefix=order-&limit=1&after=order-1")
	if code != 200 || !strings.Contains(body, "order-2") || strings.Contains(body, ">order-1<") {
		t.Fatalf("second page: %d %s", code, body)
	}
	code, body = b.get("job?id=mail-1")
	for _, want := range []string{"permanent", "1 of 1", "smtp 550 &lt;b&gt;no&lt;/b&gt;", `\xff\xfex`, "not UTF-8", `id="requeue"`, "enqueued"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("job page lacks %q: %d", want, code)
		}
	}
	// Markup in an ID and a payload is text everywhere.
	for _, p := range []string{"jobs", "job?id=" + url.QueryEscape(hostileID), "queues", "dead"} {
		code, body := b.get(p)
		if code != 200 || strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>no") {
			t.Errorf("%s: %d, unescaped markup or failure: %.400s", p, code, body)
		}
	}
	for _, p := range []string{"queues", "jobs", "job?id=order-1", "dead", "nowhere"} {
		resp, err := http.Get(b.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "form-action 'self'") ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", p, resp.Header)
		}
	}
	if code, body := b.get("api/queues"); code != 200 || !strings.Contains(body, `"name":"mail"`) {
		t.Errorf("api/queues: %d %s", code, body)
	}
}

func TestPayloadShownIsBounded(t *testing.T) {
	f := newFixture(t, ui.Config{})
	big := strings.Repeat("<a>", 100_000)
	if _, _, err := f.q.Enqueue(context.Background(), queue.NewJob{ID: "big", Payload: []byte(big)}); err != nil {
		t.Fatal(err)
	}
	code, body := f.browser(t).get("job?id=big")
	if code != 200 || !strings.Contains(body, "300000 bytes; the first 4096 shown") || strings.Contains(body, "<a>") || len(body) > 40_000 {
		t.Fatalf("%d, %d bytes", code, len(body))
	}
}

func TestActionsChangeTheQueue(t *testing.T) {
	f := newFixture(t, ui.Config{})
	b := f.browser(t)
	tok := b.token("job?id=order-1")
	code, loc, body := b.post(url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {"order-1"}})
	if code != 303 || loc != "job?done=canceled&id=order-1" {
		t.Fatalf("cancel: %d %q %s", code, loc, body)
	}
	if s := f.state(t, "order-1"); s != "dead canceled" {
		t.Fatalf("after cancel: %s", s)
	}
	if _, body := b.get(loc); !strings.Contains(body, "Canceled.") || !strings.Contains(body, "cancel by ui") {
		t.Errorf("the job page after a cancel: %.600s", body)
	}
	code, _, body = b.post(url.Values{"csrf": {tok}, "op": {"requeue"}, "id": {"order-1"}, "attempts": {"2"}, "deadline": {"1h"}})
	if code != 303 || f.state(t, "order-1") != "pending" {
		t.Fatalf("requeue: %d %s %s", code, f.state(t, "order-1"), body)
	}
	// A requeue of a job that is not dead: a clear refusal, nothing done.
	code, _, body = b.post(url.Values{"csrf": {tok}, "op": {"requeue"}, "id": {"order-2"}})
	if code != 409 || !strings.Contains(body, "only a dead job is requeued") || f.state(t, "order-2") != "pending" {
		t.Fatalf("requeue of a pending job: %d %s", code, body)
	}
	code, loc, _ = b.post(url.Values{"csrf": {tok}, "op": {"pause"}, "queue": {"default"}})
	if code != 303 || loc != "queues?done=paused" {
		t.Fatalf("pause: %d %q", code, loc)
	}
	if _, body := b.get("queues"); !strings.Contains(body, `<td data-k="paused">paused</td>`) {
		t.Errorf("queues page after pause: %s", body)
	}
	if j, err := f.q.RunOnce(context.Background(), func(context.Context, []byte) error { return nil }); err != nil || j != nil {
		t.Fatalf("a paused queue gave a job: %v %v", j, err)
	}
	code, _, body = b.post(url.Values{"csrf": {tok}, "op": {"pause"}, "queue": {"default"}})
	if code != 409 || !strings.Contains(body, "already paused") {
		t.Fatalf("second pause: %d %s", code, body)
	}
	if code, _, _ = b.post(url.Values{"csrf": {tok}, "op": {"resume"}, "queue": {"default"}}); code != 303 {
		t.Fatalf("resume: %d", code)
	}
}

// A request without the token, with a wrong one, from another site or
// with another browser's token changes nothing.
func TestCSRF(t *testing.T) {
	f := newFixture(t, ui.Config{})
	b := f.browser(t)
	tok := b.token("queues")
	other := f.browser(t)
	otherTok := other.token("queues")
	// The real token with its first character changed (to one it does
	// not already have: 1 in 64 tokens start with "x").
	wrong := "x" + tok[1:]
	if tok[0] == 'x' {
		wrong = "y" + tok[1:]
	}
	cases := []struct {
		name string
		b    *browser
		form url.Values
		hdr  []string
	}{
		{"no token", b, url.Values{"op": {"cancel"}, "id": {"order-1"}}, nil},
		{"wrong token", b, url.Values{"csrf": {wrong}, "op": {"cancel"}, "id": {"order-1"}}, nil},
		{"another browser's token", b, url.Values{"csrf": {otherTok}, "op": {"cancel"}, "id": {"order-1"}}, nil},
		{"cross-site", b, url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {"order-1"}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"other origin", b, url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {"order-1"}}, []string{"Origin", "http://evil.example"}},
		{"no cookie", &browser{t, http.DefaultClient, b.base}, url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {"order-1"}}, nil},
	}
	for _, c := range cases {
		code, _, body := c.b.post(c.form, c.hdr...)
		if code != 403 || !strings.Contains(body, "refused") {
			t.Errorf("%s: %d %.300s", c.name, code, body)
		}
	}
	if s := f.state(t, "order-1"); s != "pending" {
		t.Fatalf("state changed by refused requests: %s", s)
	}
	if code, _, _ := b.post(url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {"order-1"}}, "Origin", f.srv.URL, "Sec-Fetch-Site", "same-origin"); code != 303 {
		t.Fatalf("the same request with the token: %d", code)
	}
}

// Read-only refuses every action, with a valid token, and shows no form.
func TestReadOnlyRefusesEveryAction(t *testing.T) {
	f := newFixture(t, ui.Config{ReadOnly: true})
	b := f.browser(t)
	code, body := b.get("job?id=mail-1")
	if code != 200 || strings.Contains(body, "<form method=\"post\"") || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only job page: %d %s", code, body)
	}
	for _, form := range []url.Values{
		{"op": {"cancel"}, "id": {"order-1"}},
		{"op": {"requeue"}, "id": {"mail-1"}},
		{"op": {"pause"}, "queue": {"default"}},
		{"op": {"resume"}, "queue": {"default"}},
		{"op": {"redrive"}, "source": {"queue"}},
		{"op": {"redrive"}, "source": {"queue"}, "dry": {"1"}},
	} {
		code, _, body := b.post(form)
		if code != 403 || !strings.Contains(body, "read-only") {
			t.Errorf("%v: %d %.200s", form, code, body)
		}
	}
	if f.state(t, "order-1") != "pending" || f.state(t, "mail-1") != "dead permanent" {
		t.Fatal("read-only changed a job")
	}
	if ps, _ := f.q.Pauses(context.Background()); len(ps) != 0 {
		t.Fatalf("read-only paused %v", ps)
	}
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		req, _ := http.NewRequest(m, b.base+"act", nil)
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("%s act: %d", m, resp.StatusCode)
		}
	}
}

func TestOpsBadInput(t *testing.T) {
	f := newFixture(t, ui.Config{})
	b := f.browser(t)
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"jobs?state=zombie", 400, "state must be one of"},
		{"jobs?queue=a%20b", 400, "queue must be"},
		{"jobs?reason=%3Cx%3E", 400, "reason must be"},
		{"jobs?age=yesterday", 400, "age must be a duration"},
		{"jobs?age=-1s", 400, "age must be a duration"},
		{"jobs?limit=0", 400, "limit must be"},
		{"jobs?limit=99999", 400, "limit must be"},
		{"jobs?prefix=a%00b", 400, "prefix must not hold control characters"},
		{"jobs?state=dead&state=done", 400, "state is given 2 times"},
		{"jobs?state=pending&reason=permanent", 400, "reason selects dead jobs"},
		{"job?id=nope", 404, "no job has the ID"},
		{"job", 400, "id is required"},
		{"job?id=" + strings.Repeat("x", 300), 400, "at most 255 bytes"},
		{"nowhere", 404, ""},
	} {
		code, body := b.get(c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, want %d with %q: %.300s", c.path, code, c.code, c.want, body)
		}
		if strings.Contains(body, "<x>") {
			t.Errorf("GET %s: unescaped", c.path)
		}
	}
	tok := b.token("queues")
	for _, c := range []struct {
		form url.Values
		code int
		want string
	}{
		{url.Values{"op": {"cancel"}, "id": {"nope"}}, 404, "nope"},
		{url.Values{"op": {"cancel"}, "id": {"mail-1"}}, 409, "state dead permanent"},
		{url.Values{"op": {"explode"}}, 400, "op must be"},
		{url.Values{"op": {"pause"}, "queue": {"no way"}}, 400, "queue must be"},
		{url.Values{"op": {"requeue"}, "id": {"mail-1"}, "attempts": {"0"}}, 400, "attempts (granted) must be"},
		{url.Values{"op": {"requeue"}, "id": {"mail-1"}, "deadline": {"soon"}}, 400, "deadline must be a duration"},
		{url.Values{"op": {"redrive"}, "source": {"kafka nowhere"}}, 404, "no dead-letter source"},
		{url.Values{"op": {"redrive"}, "source": {"queue"}, "rate": {"0"}}, 400, "rate must be"},
		{url.Values{"op": {"redrive"}, "source": {"queue"}, "rate": {"NaN"}}, 400, "rate must be"},
		{url.Values{"op": {"redrive"}, "source": {"queue"}, "limit": {"-1"}}, 400, "limit must be"},
		{url.Values{"op": {"cancel"}, "id": {strings.Repeat("x", 20_000)}}, 413, "at most"},
	} {
		c.form.Set("csrf", tok)
		code, _, body := b.post(c.form)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("POST %.80v: %d, want %d with %q: %.300s", c.form, code, c.code, c.want, body)
		}
	}
	if f.state(t, "mail-1") != "dead permanent" {
		t.Fatal("a refused action changed a job")
	}
}

// Two browsers cancel one job at once: one succeeds, the other is told
// why not; the job is canceled once (one event in its history).
func TestConcurrentActionsOnOneJob(t *testing.T) {
	f := newFixture(t, ui.Config{})
	a, b := f.browser(t), f.browser(t)
	ta, tb := a.token("job?id=order-2"), b.token("job?id=order-2")
	for round := 0; round < 20; round++ {
		id := fmt.Sprintf("race-%d", round)
		if _, _, err := f.q.Enqueue(context.Background(), queue.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
		codes := make([]int, 2)
		bodies := make([]string, 2)
		var wg sync.WaitGroup
		for i, br := range []*browser{a, b} {
			tok := []string{ta, tb}[i]
			wg.Go(func() {
				codes[i], _, bodies[i] = br.post(url.Values{"csrf": {tok}, "op": {"cancel"}, "id": {id}})
			})
		}
		wg.Wait()
		ok, refused := 0, 0
		for i, c := range codes {
			switch c {
			case 303:
				ok++
			case 409:
				refused++
				if !strings.Contains(bodies[i], "nothing was") {
					t.Errorf("refusal without a clear message: %s", bodies[i])
				}
			}
		}
		if ok != 1 || refused != 1 {
			t.Fatalf("round %d: codes %v", round, codes)
		}
		h, err := f.q.History(context.Background(), id)
		if err != nil || len(h) != 1 {
			t.Fatalf("history %v %v", h, err)
		}
	}
}

// fakeDLQ is a broker DLQ in memory: Next reads it, Remove deletes.
type fakeDLQ struct {
	mu    sync.Mutex
	msgs  []broker.DeadLetter
	moved []string
}

type fakeSrc struct {
	q *fakeDLQ
	i int
	n int
}

type fakeMsg struct {
	q *fakeDLQ
	d broker.DeadLetter
}

func (s *fakeSrc) Next(ctx context.Context) (broker.RedriveMessage, error) {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.i >= s.n || s.i >= len(s.q.msgs) {
		return nil, io.EOF
	}
	m := fakeMsg{s.q, s.q.msgs[s.i]}
	s.i++
	return m, nil
}
func (m fakeMsg) DeadLetter() broker.DeadLetter                       { return m.d }
func (m fakeMsg) Destination() string                                 { return m.d.Origin }
func (m fakeMsg) Republish(ctx context.Context, _ broker.State) error { return nil }
func (m fakeMsg) Remove(ctx context.Context) error {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	for i, x := range m.q.msgs {
		if x.ID == m.d.ID {
			m.q.msgs = append(m.q.msgs[:i], m.q.msgs[i+1:]...)
			break
		}
	}
	m.q.moved = append(m.q.moved, m.d.ID)
	return nil
}

func (q *fakeDLQ) open(context.Context) (broker.RedriveSource, func(), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return &fakeSrc{q: q, n: len(q.msgs)}, func() {}, nil
}

func TestDeadLettersAndRedrive(t *testing.T) {
	dlq := &fakeDLQ{}
	for i := range 3 {
		dlq.msgs = append(dlq.msgs, broker.DeadLetter{ID: fmt.Sprintf("m-%d", i), Payload: []byte("x"),
			State: broker.State{Attempts: 5, Reason: "exhausted", Origin: "orders", Error: hostileID}})
	}
	f := newFixture(t, ui.Config{DeadLetters: []ui.DeadLetters{ui.BrokerDeadLetters("rabbitmq orders.dlq", dlq.open)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.d.Run(ctx)
	b := f.browser(t)
	code, body := b.get("dead")
	for _, want := range []string{"mail-1", "m-0", "m-2", "rabbitmq orders.dlq", `value="rabbitmq orders.dlq"`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("dead page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("unescaped error text")
	}
	tok := tokenRE.FindStringSubmatch(body)[1]
	code, _, body = b.post(url.Values{"csrf": {tok}, "op": {"redrive"}, "source": {"rabbitmq orders.dlq"}, "dry": {"1"}})
	if code != 200 || !strings.Contains(body, "3 would move") || len(dlq.moved) != 0 {
		t.Fatalf("dry run: %d %v %.500s", code, dlq.moved, body)
	}
	code, loc, _ := b.post(url.Values{"csrf": {tok}, "op": {"redrive"}, "source": {"rabbitmq orders.dlq"}, "rate": {"1000"}, "limit": {"2"}})
	if code != 303 || loc != "dead?done=redriving" {
		t.Fatalf("redrive: %d %q", code, loc)
	}
	code, loc, _ = b.post(url.Values{"csrf": {tok}, "op": {"redrive"}, "source": {"queue"}, "rate": {"1000"}})
	if code != 303 {
		t.Fatalf("queue redrive: %d %q", code, loc)
	}
	// The redrives run in the background; the queue events say when both
	// have ended.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := uievents.AwaitRedrives(wctx, b.c, b.base+"events/queues", "rabbitmq orders.dlq", "queue"); err != nil {
		t.Fatal(err)
	}
	dlq.mu.Lock()
	moved := len(dlq.moved)
	dlq.mu.Unlock()
	if moved != 2 || f.state(t, "mail-1") != "pending" {
		t.Fatalf("moved %d, mail-1 %s", moved, f.state(t, "mail-1"))
	}
}

func TestProxyPage(t *testing.T) {
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/proxies":
			fmt.Fprint(w, `[{"name":"main"},{"name":"<b>x</b>"}]`)
		case "/proxies/main/stats", "/proxies/%3Cb%3Ex%3C%2Fb%3E/stats", "/proxies/<b>x</b>/stats":
			fmt.Fprintf(w, `{"name":%q,"kind":"http","total":42,"peak":7,"requests":10,"attempts_per_request":4.2,"faults":["status 503 p=0.5"]}`, strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/proxies/"), "/stats"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer ctl.Close()
	f := newFixture(t, ui.Config{Proxy: ctl.URL})
	b := f.browser(t)
	code, body := b.get("proxy")
	for _, want := range []string{"<td>42</td>", "<td>4.20</td>", "status 503 p=0.5", "&lt;b&gt;x&lt;/b&gt;"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("proxy page lacks %q: %d %.800s", want, code, body)
		}
	}
	if code, body := b.get("api/proxy"); code != 200 || !strings.Contains(body, `"total":42`) {
		t.Errorf("api/proxy: %d %s", code, body)
	}
	ctl.Close()
	if code, body := b.get("proxy"); code != 200 || !strings.Contains(body, "is unreachable") {
		t.Errorf("proxy down: %d %s", code, body)
	}
	if _, err := ui.New(ui.Config{Proxy: "ftp://x"}); !errors.Is(err, ui.ErrInvalid) {
		t.Errorf("ftp proxy: %v", err)
	}
}

func TestBasicAuth(t *testing.T) {
	f := newFixture(t, ui.Config{Authorize: ui.BasicAuth("ops", "s3cret")})
	b := f.browser(t)
	if code, _ := b.get("queues"); code != 401 {
		t.Fatalf("no credentials: %d", code)
	}
	req, _ := http.NewRequest("GET", b.base+"queues", nil)
	req.SetBasicAuth("ops", "wrong")
	resp, _ := b.c.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	req.SetBasicAuth("ops", "s3cret")
	resp, _ = b.c.Do(req)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "s3cret") {
		t.Fatalf("right password: %d", resp.StatusCode)
	}
}

// A search of every queue that would read too many jobs is refused,
// naming what to narrow; the search reads no payloads, so 25 queues of
// 500 (12,500 jobs, over the 5,000 of a search with payloads) are read,
// and their sizes are not known (-1).
func TestSearchTooWide(t *testing.T) {
	f := newFixture(t, ui.Config{})
	ctx := context.Background()
	for i := range 24 {
		if _, _, err := f.q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("w-%d", i), Queue: fmt.Sprintf("q%02d", i), Payload: []byte("big")}); err != nil {
			t.Fatal(err)
		}
	}
	b := f.browser(t)
	if code, body := b.get("jobs?limit=1000"); code != 400 || !strings.Contains(body, "choose a queue or a smaller limit") {
		t.Fatalf("%d %.300s", code, body)
	}
	if code, _ := b.get("jobs?limit=1000&queue=q03"); code != 200 {
		t.Fatalf("one queue: %d", code)
	}
	if code, body := b.get("jobs?limit=500"); code != 200 || !strings.Contains(body, "w-23") {
		t.Fatalf("25 queues of 500: %d %.300s", code, body)
	}
	jobs, _, err := ui.NewQueues(f.q).Jobs(ctx, ui.JobFilter{Limit: 500})
	if err != nil || len(jobs) < 24 || jobs[0].PayloadSize != -1 {
		t.Fatalf("Jobs = %d jobs (first %+v), %v; want 24 or more, without payload sizes", len(jobs), jobs[0], err)
	}
}

// statsCounting counts the store-wide counts read (StatsByQueue).
type statsCounting struct {
	*queue.MemoryStore
	calls atomic.Int32
}

func (s *statsCounting) StatsByQueue(ctx context.Context, now int64) (map[string]queue.Stats, error) {
	s.calls.Add(1)
	return s.MemoryStore.StatsByQueue(ctx, now)
}

// A search of every queue takes the queues' names from the last
// Overview instead of counting the store again; a queue whose first job
// came after it is searched from the next Overview on.
func TestSearchTakesSampledNames(t *testing.T) {
	st := &statsCounting{MemoryStore: queue.NewMemoryStore()}
	q, err := queue.New(st, queue.Config{Queue: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	enqueue := func(id, name string) {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id, Queue: name}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("a-1", "a")
	enqueue("b-1", "b")
	qs := ui.NewQueues(q)
	search := func(want int) {
		t.Helper()
		jobs, _, err := qs.Jobs(ctx, ui.JobFilter{Limit: 10})
		if err != nil || len(jobs) != want {
			t.Fatalf("Jobs = %v, %v; want %d jobs", jobs, err, want)
		}
	}
	search(2) // no Overview yet: the search counts the store itself
	if n := st.calls.Load(); n != 1 {
		t.Fatalf("StatsByQueue read %d times; want 1", n)
	}
	if _, err := qs.Overview(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue("c-1", "c")
	search(2)
	if n := st.calls.Load(); n != 2 {
		t.Fatalf("StatsByQueue read %d times after an Overview and a search; want 2", n)
	}
	if _, err := qs.Overview(ctx); err != nil {
		t.Fatal(err)
	}
	search(3)
}
