package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/internal/report/browser"
)

func TestUICLIBadFlags(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "x"); code != exitOK {
		t.Fatal(e)
	}
	authFile := filepath.Join(dir, "auth")
	os.WriteFile(authFile, []byte("nopassword\n"), 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dlq", "foo"}, exitUsage, "want KIND:NAME"},
		{[]string{"--dlq", "sqs:x"}, exitUsage, "rabbitmq, jetstream or kafka"},
		{[]string{"--dlq", "kafka:orders-dlq"}, exitUsage, "--kafka is required"},
		{[]string{"--amqp", "amqp://u:hunter2@h/"}, exitUsage, "--amqp is given but no --dlq rabbitmq"},
		{[]string{"--listen", "nowhere"}, exitUsage, "--listen must be host:port"},
		{[]string{"--proxy", "ftp://x"}, exitUsage, "--proxy must be an http://"},
		{[]string{"--db", "postgres:app:pw@db"}, exitUsage, ""},
		{[]string{"--db", filepath.Join(dir, "missing.db")}, exitFail, "does not exist"},
		{[]string{"--db", db, "--basic-auth-file", authFile}, exitUsage, "want user:password"},
		{[]string{"--db", db, "--basic-auth-file", filepath.Join(dir, "none")}, exitUsage, "--basic-auth-file"},
		{[]string{"stray"}, exitUsage, "unexpected argument"},
	} {
		var o, e bytes.Buffer
		code := run(context.Background(), append([]string{"ui"}, c.args...), &o, &e)
		if code != c.code || !strings.Contains(e.String(), c.want) {
			t.Errorf("ui %v: exit %d, want %d with %q: %s", c.args, code, c.code, c.want, e.String())
		}
		for _, secret := range []string{"hunter2", "pw@", "nopassword"} {
			if strings.Contains(o.String()+e.String(), secret) {
				t.Errorf("ui %v printed a secret: %s%s", c.args, o.String(), e.String())
			}
		}
	}
	if code, _, _ := cli(t, "", "enqueue", "--db", db, "--id", "y"); code != exitOK {
		t.Fatal("enqueue")
	}
	var o bytes.Buffer
	if code := run(context.Background(), []string{"ui", "--help"}, &o, io.Discard); code != exitOK || !strings.Contains(o.String(), "--read-only") {
		t.Errorf("--help: %d %s", code, o.String())
	}
}

// startUI runs the built stagger ui with args (plus --listen on a free
// port) and returns its base URL; the process is stopped with SIGTERM at
// the end of the test and must exit 0.
func startUI(t *testing.T, bin string, env []string, args ...string) (base string, output func() string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"ui", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	var mu sync.Mutex
	cmd.Stderr = &lockedWriter{w: &stderr, mu: &mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stagger ui did not exit cleanly on SIGTERM: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Error("stagger ui did not stop within 20s of SIGTERM")
		}
	})
	select {
	case l := <-lines:
		_, rest, ok := strings.Cut(l, "serving ")
		if !ok {
			t.Fatalf("first line %q", l)
		}
		base = strings.Fields(rest)[0]
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("stagger ui did not start: %s", stderr.String())
	}
	return base, func() string { mu.Lock(); defer mu.Unlock(); return out.String() + stderr.String() }
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Basic credentials from a file or the environment are asked for on
// every request and never printed.
func TestUICommandBasicAuth(t *testing.T) {
	bin := buildStagger(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "x"); code != exitOK {
		t.Fatal(e)
	}
	authFile := filepath.Join(dir, "auth")
	if err := os.WriteFile(authFile, []byte("ops:Sup3r-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, how := range map[string]struct {
		env  []string
		args []string
	}{
		"file": {nil, []string{"--db", db, "--basic-auth-file", authFile}},
		"env":  {[]string{"STAGGER_UI_BASIC_AUTH=ops:Sup3r-s3cret"}, []string{"--db", db}},
	} {
		t.Run(name, func(t *testing.T) {
			base, output := startUI(t, bin, how.env, how.args...)
			for _, c := range []struct {
				user, pass string
				code       int
			}{{"", "", 401}, {"ops", "wrong", 401}, {"ops", "Sup3r-s3cret", 200}} {
				req, _ := http.NewRequest("GET", base+"queues", nil)
				if c.user != "" {
					req.SetBasicAuth(c.user, c.pass)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.code || strings.Contains(string(body), "Sup3r") {
					t.Errorf("%s:%s: %d, want %d", c.user, c.pass, resp.StatusCode, c.code)
				}
			}
			if strings.Contains(output(), "Sup3r") {
				t.Errorf("the password was printed: %s", output())
			}
		})
	}
}

// The command as a person runs it: stagger ui on an SQLite store and a
// running stagger proxy's control API, each page loaded in Chromium; a
// cancel clicked on a job's page shows in the queues page of another tab.
func TestUICommandBrowser(t *testing.T) {
	chromium := browser.Require(t)
	bin := buildStagger(t)
	dir := t.TempDir()
	shots := shotDir(t)
	db := filepath.Join(dir, "q.db")
	for i := 1; i <= 4; i++ {
		if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", fmt.Sprintf("invoice-%d", i), "--payload", `{"total": "<42>"}`); code != exitOK {
			t.Fatal(e)
		}
	}
	// A running proxy with a control API and some traffic through it.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer up.Close()
	proxyAddr, controlAddr := freePort(t), freePort(t)
	proxy := exec.Command(bin, "proxy", "--listen", proxyAddr, "--upstream", up.URL, "--control", controlAddr, "--fault", "status 503 p=0.5")
	proxy.Dir = dir // its report
	out, err := proxy.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { proxy.Process.Signal(syscall.SIGTERM); proxy.Wait() }()
	// Its first line is printed once both listeners are open.
	lines := bufio.NewReader(out)
	if l, err := lines.ReadString('\n'); err != nil || !strings.Contains(l, "listening on") {
		t.Fatalf("the proxy did not start: %q %v", l, err)
	}
	go io.Copy(io.Discard, lines)
	for range 20 {
		resp, err := http.Get("http://" + proxyAddr + "/pay")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	base, _ := startUI(t, bin, nil, "--db", db, "--proxy", "http://"+controlAddr, "--interval", "200ms")

	watch := newChromium(t, chromium)
	act := newTab(t, watch)
	row := `#queues tr[data-queue="default"] `
	cdp(t, watch, "queues", chromedp.Navigate(base+"queues"), chromedp.WaitVisible("#queues"))
	waitText(t, watch, row+`[data-k="due"]`, "4")
	cdp(t, act, "job", chromedp.Navigate(base+"job?id=invoice-2"), chromedp.WaitVisible("#job"))
	cdp(t, act, "cancel", chromedp.Click("#cancel"), chromedp.WaitVisible("#msg"))
	waitText(t, act, "#job-state", "dead (canceled)")
	waitText(t, watch, row+`[data-k="due"]`, "3")
	waitText(t, watch, row+`[data-k="canceled"]`, "1")
	cdp(t, act, "jobs", chromedp.Navigate(base+"jobs?state=dead"), chromedp.WaitVisible("#jobs"))
	if n := eval[int](t, act, `document.querySelectorAll("#jobs tr[data-id]").length`); n != 1 {
		t.Fatalf("%d dead jobs listed, want 1", n)
	}
	cdp(t, act, "dead", chromedp.Navigate(base+"dead"), chromedp.WaitVisible("#dead"))
	cdp(t, act, "proxy", chromedp.Navigate(base+"proxy"), chromedp.WaitVisible("#proxies"))
	waitText(t, act, "#status", "live")
	total := eval[string](t, act, `document.querySelector("#proxies tbody tr td:nth-child(5)").textContent`)
	if total != "20" {
		t.Fatalf("the proxy page shows %q attempts, want 20", total)
	}
	shoot(t, act, shots, "ui-proxy")
	cdp(t, act, "dependencies", chromedp.Navigate(base), chromedp.WaitVisible("#deps"))
	shoot(t, act, shots, "ui-dependencies")
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A RabbitMQ DLQ beside the queue's dead jobs on one page: listed, a dry
// run that moves nothing, then a paced redrive back to the origin queue.
func TestUICommandRabbitMQ(t *testing.T) {
	ch, name := rabbitQueues(t, "stg-ui")
	for _, id := range []string{"order-7", "order-8"} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", name+".dlq", false, false, amqp.Publishing{
			MessageId: id, Body: []byte("payload"), DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{"x-stagger-reason": "permanent", "x-stagger-attempt": "3", "x-stagger-exchange": "",
				"x-stagger-routing-key": name, "x-stagger-origin": "/" + name, "x-stagger-error": "<b>card declined</b>",
				"x-stagger-first-failure": fmt.Sprint(time.Now().Add(-time.Hour).UnixMilli())},
		})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish the dead letter: %v", err)
		}
	}
	checkDashboardRedrive(t, dashboardDLQ{
		args:   []string{"--dlq", "rabbitmq:" + name + ".dlq", "--amqp", amqpTestURL()},
		source: "rabbitmq " + name + ".dlq",
		page:   []string{"/" + name},
		counts: func() (int, int) { return rabbitCount(t, ch, name+".dlq"), rabbitCount(t, ch, name) },
		secret: "guest:guest",
	})
}

// buildStagger builds stagger and this companion into one temporary
// directory, as go install does, and returns stagger's path: `stagger ui`
// runs here through stagger, as a user runs it.
func buildStagger(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the command")
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "..", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "stagger")
}
