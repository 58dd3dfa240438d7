package main

import (
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/staggerhq/stagger/internal/report/browser"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/ui"
)

// shotDir is where the browser tests keep their screenshots:
// $STAGGER_SCREENSHOTS, else a temporary directory.
func shotDir(t *testing.T) string {
	dir := os.Getenv("STAGGER_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newChromium starts one headless Chromium (its own profile: its own
// cookies, as one person's browser) and returns a context of its first
// tab.
func newChromium(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1400, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return ctx
}

// newTab opens another tab of the browser of ctx (same cookies).
func newTab(t *testing.T, ctx context.Context) context.Context {
	tab, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

func cdp(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval runs JavaScript in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, js string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// waitText waits until the element sel of the page in ctx reads want:
// what a person watching the page sees change. It polls the page (bounded:
// 20 s), and a page that is navigating meanwhile is asked again.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.trim() === %q; })()`, sel, want)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||"(none)"`, sel)))
			t.Fatalf("%s: want %q, it reads %q (%v)", sel, want, strings.TrimSpace(got), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// shoot saves a PNG of the viewport and checks it decodes.
func shoot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(strings.NewReader(string(buf))); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

// uiFixture is a dashboard on a memory queue: five pending orders, three
// dead mails; a worker-less queue, so only the page's actions move jobs.
func uiFixture(t *testing.T, cfg ui.Config) (*queue.Queue, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	store := queue.NewMemoryStore()
	q, err := queue.New(store, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("order-%d", i), Payload: []byte(fmt.Sprintf(`{"order":%d,"note":"<b>bold?</b>"}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	mail, err := queue.New(store, queue.Config{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, _, err := mail.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("mail-%d", i), MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := mail.RunOnce(ctx, func(context.Context, []byte) error {
			return retry.Permanent(errors.New("smtp 550: mailbox <unavailable>"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Queues = ui.NewQueues(q)
	cfg.Interval = 200 * time.Millisecond
	d, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	go d.Run(rctx)
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", d))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { cancel(); srv.Close() })
	return q, srv
}

func uiJobState(t *testing.T, q *queue.Queue, id string) string {
	j, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(j.State) + " " + string(j.DeadReason))
}

// A person with the queues page open in one tab acts on jobs in another:
// cancel, requeue, pause and resume, a dry run and a paced redrive; the
// counts in the first tab change as they do, without a reload.
func TestUIBrowserActions(t *testing.T) {
	chromium := browser.Require(t)
	dir := shotDir(t)
	q, srv := uiFixture(t, ui.Config{})
	base := srv.URL + "/ops/"
	watch := newChromium(t, chromium)
	act := newTab(t, watch)

	row := `#queues tr[data-queue="default"] `
	mailRow := `#queues tr[data-queue="mail"] `
	cdp(t, watch, "load queues", chromedp.Navigate(base+"queues"), chromedp.WaitVisible("#queues"))
	waitText(t, watch, "#status", "live")
	waitText(t, watch, row+`[data-k="due"]`, "5")
	waitText(t, watch, mailRow+`[data-k="dead"]`, "3")
	shoot(t, watch, dir, "ui-queues")

	// Cancel order-1 on its page.
	cdp(t, act, "job page", chromedp.Navigate(base+"job?id=order-1"), chromedp.WaitVisible("#job"))
	payload := eval[string](t, act, `document.querySelector("#payload").textContent`)
	if !strings.Contains(payload, "<b>bold?</b>") {
		t.Fatalf("payload shown as %q, want the text with its markup as text", payload)
	}
	cdp(t, act, "cancel", chromedp.Click("#cancel"), chromedp.WaitVisible("#msg"))
	waitText(t, act, "#msg", "Canceled.")
	waitText(t, act, "#job-state", "dead (canceled)")
	shoot(t, act, dir, "ui-job")
	waitText(t, watch, row+`[data-k="due"]`, "4")
	waitText(t, watch, row+`[data-k="canceled"]`, "1")
	if s := uiJobState(t, q, "order-1"); s != "dead canceled" {
		t.Fatalf("order-1 is %s", s)
	}

	// Requeue it: back to due.
	cdp(t, act, "requeue", chromedp.Click("#requeue"), chromedp.WaitVisible("#msg"))
	waitText(t, act, "#msg", "Requeued: the job is due now.")
	waitText(t, watch, row+`[data-k="due"]`, "5")
	waitText(t, watch, row+`[data-k="canceled"]`, "0")

	// Pause the queue from its job page; the watching tab sees it paused.
	cdp(t, act, "pause", chromedp.Click("#pause"), chromedp.WaitVisible("#msg"))
	waitText(t, watch, row+`[data-k="paused"]`, "paused")
	if j, err := q.RunOnce(context.Background(), func(context.Context, []byte) error { return nil }); err != nil || j != nil {
		t.Fatalf("a paused queue gave a job: %v, %v", j, err)
	}
	cdp(t, act, "resume", chromedp.Click("#resume"), chromedp.WaitVisible("#msg"))
	waitText(t, watch, row+`[data-k="paused"]`, "running")

	// The dead letters: a dry run moves nothing, a redrive at 20/s
	// requeues the three mails and the dead count falls live.
	cdp(t, act, "dead", chromedp.Navigate(base+"dead"), chromedp.WaitVisible("#dead"))
	shoot(t, act, dir, "ui-dead")
	cdp(t, act, "dry run", chromedp.WaitVisible(`form.redrive`),
		chromedp.Click(`form.redrive input[name="dry"]`), chromedp.Click(`form.redrive button`), chromedp.WaitVisible("#dry-summary"))
	summary := eval[string](t, act, `document.querySelector("#dry-summary").textContent`)
	if !strings.Contains(summary, "3 would move") || uiJobState(t, q, "mail-1") != "dead permanent" {
		t.Fatalf("dry run: %q, mail-1 %s", summary, uiJobState(t, q, "mail-1"))
	}
	cdp(t, act, "redrive", chromedp.Navigate(base+"dead"), chromedp.WaitVisible(`form.redrive`),
		chromedp.SetValue(`form.redrive input[name="rate"]`, "20"), chromedp.Click(`form.redrive button`), chromedp.WaitVisible("#msg"))
	waitText(t, watch, mailRow+`[data-k="dead"]`, "0")
	waitText(t, watch, mailRow+`[data-k="due"]`, "3")
	waitText(t, act, "#redrives tbody tr td:nth-child(6)", "finished")
	for i := 1; i <= 3; i++ {
		if s := uiJobState(t, q, fmt.Sprintf("mail-%d", i)); s != "pending" {
			t.Fatalf("mail-%d is %s after the redrive", i, s)
		}
	}

	// The job search, filtered.
	cdp(t, act, "jobs", chromedp.Navigate(base+"jobs?queue=default&prefix=order-&limit=3"), chromedp.WaitVisible("#jobs"))
	rows := eval[int](t, act, `document.querySelectorAll("#jobs tbody tr[data-id]").length`)
	if rows != 3 {
		t.Fatalf("jobs page lists %d rows, want 3", rows)
	}
	cdp(t, act, "next page", chromedp.Click("#next"), chromedp.WaitVisible("#jobs"))
	rows = eval[int](t, act, `document.querySelectorAll("#jobs tbody tr[data-id]").length`)
	if rows != 2 {
		t.Fatalf("second page lists %d rows, want 2", rows)
	}
	cdp(t, act, "jobs", chromedp.Navigate(base+"jobs?queue=default"), chromedp.WaitVisible("#jobs"))
	shoot(t, act, dir, "ui-jobs")
	cdp(t, act, "bad filter", chromedp.Navigate(base+"jobs?age=yesterday"), chromedp.WaitVisible("#err"))
	waitText(t, act, "#err", `bad filter: age must be a duration from 0 to 100 years, such as 90s, 15m or 2h, got "yesterday"`)
}

// Two people on two browsers cancel one job at the same moment: one sees
// it canceled, the other why nothing was done; it is canceled once.
func TestUIBrowserTwoPeopleOneJob(t *testing.T) {
	chromium := browser.Require(t)
	q, srv := uiFixture(t, ui.Config{})
	base := srv.URL + "/ops/"
	people := []context.Context{newChromium(t, chromium), newChromium(t, chromium)}
	for _, p := range people {
		cdp(t, p, "job page", chromedp.Navigate(base+"job?id=order-3"), chromedp.WaitVisible("#cancel"))
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range people {
		wg.Go(func() { errs[i] = chromedp.Do(p, chromedp.Click("#cancel"), chromedp.WaitVisible("#msg, #err")) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	saw := map[string]int{}
	for _, p := range people {
		got := eval[string](t, p, `(document.querySelector("#msg") || document.querySelector("#err") || {textContent: "(nothing)"}).textContent`)
		switch {
		case got == "Canceled.":
			saw["canceled"]++
		case strings.Contains(got, "nothing was"):
			saw["refused"]++
		default:
			t.Errorf("a person sees %q", got)
		}
	}
	if saw["canceled"] != 1 || saw["refused"] != 1 {
		t.Fatalf("%v, want one canceled and one refused", saw)
	}
	if h, err := q.History(context.Background(), "order-3"); err != nil || len(h) != 1 {
		t.Fatalf("history %v %v: want one cancel", h, err)
	}
}

// Read-only: no action button on any page, and a form posted anyway (a
// person's own, from the page's origin and with its token) is refused.
// A request without the token changes nothing either.
func TestUIBrowserReadOnlyAndCSRF(t *testing.T) {
	chromium := browser.Require(t)
	for _, readOnly := range []bool{true, false} {
		t.Run(fmt.Sprintf("read-only=%v", readOnly), func(t *testing.T) {
			q, srv := uiFixture(t, ui.Config{ReadOnly: readOnly})
			base := srv.URL + "/ops/"
			ctx := newChromium(t, chromium)
			buttons := 0
			for _, p := range []string{"queues", "job?id=order-1", "job?id=mail-1", "dead"} {
				cdp(t, ctx, p, chromedp.Navigate(base+p), chromedp.WaitReady("main"))
				buttons += eval[int](t, ctx, `document.querySelectorAll("form[method=post] button").length`)
			}
			if readOnly != (buttons == 0) {
				t.Fatalf("%d action buttons", buttons)
			}
			// Post forms the way a page would: with the cookie, from the
			// origin, with the token (read-only) or without it.
			token := ""
			if !readOnly {
				cdp(t, ctx, "token", chromedp.Navigate(base+"job?id=order-1"), chromedp.WaitVisible("#job"))
				token = eval[string](t, ctx, `document.querySelector("input[name=csrf]").value`)
			}
			for _, form := range []string{"op=cancel&id=order-1", "op=requeue&id=mail-1", "op=pause&queue=default", "op=redrive&source=queue"} {
				body := form
				if readOnly {
					body += "&csrf=" + token
				}
				status := eval[int](t, ctx, fmt.Sprintf(`fetch("act", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q, redirect: "manual"}).then(r => r.status)`, body),
					chromedp.EvalAwaitPromise)
				if status != 403 {
					t.Errorf("%s: %d, want 403", form, status)
				}
			}
			if uiJobState(t, q, "order-1") != "pending" || uiJobState(t, q, "mail-1") != "dead permanent" {
				t.Fatal("a refused request changed a job")
			}
			if ps, _ := q.Pauses(context.Background()); len(ps) != 0 {
				t.Fatalf("a refused request paused %v", ps)
			}
		})
	}
}
