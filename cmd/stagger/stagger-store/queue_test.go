package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cli runs `stagger queue args...` in-process with stdin.
func cli(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	if len(args) > 0 && args[0] == "enqueue" {
		code = queueEnqueueFrom(context.Background(), args[1:], strings.NewReader(stdin), &o, &e)
	} else {
		code = run(context.Background(), append([]string{"queue"}, args...), &o, &e)
	}
	return code, o.String(), e.String()
}

func tempDB(t *testing.T) string { return filepath.Join(t.TempDir(), "q.db") }

func showJSON(t *testing.T, db, id string) map[string]any {
	t.Helper()
	code, out, errOut := cli(t, "", "show", "--db", db, "--id", id, "--json")
	if code != exitOK {
		t.Fatalf("show %s: exit %d: %s", id, code, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("show output %q: %v", out, err)
	}
	return m
}

func statsJSONOf(t *testing.T, db string) statsJSON {
	t.Helper()
	code, out, errOut := cli(t, "", "stats", "--db", db, "--json")
	if code != exitOK {
		t.Fatalf("stats: exit %d: %s", code, errOut)
	}
	var s statsJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("stats output %q: %v", out, err)
	}
	return s
}

func TestQueueEnqueueShowAndIdempotence(t *testing.T) {
	db := tempDB(t)
	before := time.Now().UnixMilli()
	if code, out, e := cli(t, "", "enqueue", "--db", db, "--id", "order-1", "--payload", "hello", "--max-attempts", "4", "--deadline", "1h"); code != exitOK || !strings.HasPrefix(out, "created order-1") {
		t.Fatalf("enqueue: %d %q %q", code, out, e)
	}
	m := showJSON(t, db, "order-1")
	for _, k := range []string{"attempts", "max_attempts", "state", "dead_reason", "deadline_ms", "available_at_ms", "last_error"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("show --json lacks %q: %v", k, m)
		}
	}
	dl := int64(m["deadline_ms"].(float64))
	if m["state"] != "pending" || m["max_attempts"].(float64) != 4 || m["payload"] != "hello" || dl < before+3600_000 || dl > time.Now().UnixMilli()+3600_000 {
		t.Fatalf("show: %v", m)
	}
	// Spend an attempt, then re-submit with other settings: nothing resets.
	if code, _, e := cli(t, "", "run-once", "--db", db, "--exec", "exit 75"); code != exitOK {
		t.Fatalf("run-once: %d %s", code, e)
	}
	code, out, _ := cli(t, "", "enqueue", "--db", db, "--id", "order-1", "--payload", "hello", "--max-attempts", "9", "--deadline", "48h")
	if code != exitOK || !strings.HasPrefix(out, "exists  order-1 (attempts 1/4") {
		t.Fatalf("re-submit: %d %q", code, out)
	}
	// Another payload under the same ID is not stored, and the output says so.
	code, out, _ = cli(t, "", "enqueue", "--db", db, "--id", "order-1", "--payload", "other")
	if code != exitOK || !strings.HasPrefix(out, "exists, payload differs (the stored one is kept): order-1 (attempts 1/4") {
		t.Fatalf("re-submit with another payload: %d %q", code, out)
	}
	code, out, _ = cli(t, "", "enqueue", "--db", db, "--id", "order-1", "--payload", "other", "--json")
	if code != exitOK || !strings.Contains(out, `"created":false,"payload_differs":true`) {
		t.Fatalf("re-submit --json: %d %q", code, out)
	}
	if m := showJSON(t, db, "order-1"); m["payload"] != "hello" {
		t.Fatalf("payload replaced: %v", m)
	}
	if m := showJSON(t, db, "order-1"); int64(m["deadline_ms"].(float64)) != dl || m["attempts"].(float64) != 1 {
		t.Fatalf("re-submit reset the job: %v", m)
	}
}

func TestQueueEnqueueStdin(t *testing.T) {
	db := tempDB(t)
	in := `{"id":"a","payload":"text","max_attempts":3,"deadline":"2h"}
{"id":"b","payload":{"k":[1,2]}}

{"id":"c","deadline":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}
`
	code, out, e := cli(t, in, "enqueue", "--db", db, "--max-attempts", "7")
	if code != exitOK || strings.Count(out, "created") != 3 {
		t.Fatalf("enqueue: %d %q %q", code, out, e)
	}
	if m := showJSON(t, db, "b"); m["payload"] != `{"k":[1,2]}` || m["max_attempts"].(float64) != 7 {
		t.Fatalf("b: %v", m)
	}
	if m := showJSON(t, db, "a"); m["payload"] != "text" || m["max_attempts"].(float64) != 3 {
		t.Fatalf("a: %v", m)
	}
}

func TestQueueEnqueueRejectsBadInputAtomically(t *testing.T) {
	good := `{"id":"ok1"}` + "\n"
	for _, tc := range []struct{ line, want string }{
		{`{"id":"x","max_attempts":true}`, `"max_attempts" must be a number, got a boolean`},
		{`{"id":"x","max_attempts":NaN}`, "NaN and Infinity"},
		{`{"id":"x","max_attempts":Infinity}`, "NaN and Infinity"},
		{`{"id":"x","max_attempts":-1}`, `"max_attempts" must be in [1, 1000000], got -1`},
		{`{"id":"x","max_attempts":0}`, `"max_attempts" must be in [1, 1000000], got 0`},
		{`{"id":"x","max_attempts":1000001}`, "got 1000001"},
		{`{"id":"x","max_attempts":1e400}`, `"max_attempts" must be in`},
		{`{"id":"x","max_attempts":2.5}`, "whole number"},
		{`{"id":"x","max_attempts":"3"}`, "must be a number, got a string"},
		{`{"id":"x","deadline":3600}`, `"deadline" must be a string, got a number`},
		{`{"id":"x","deadline":true}`, `got a boolean`},
		{`{"id":"x","deadline":"-1h"}`, "duration must be in"},
		{`{"id":"x","deadline":"2001-01-01T00:00:00Z"}`, "not in the future"},
		{`{"id":"x","deadline":"soon"}`, "neither a duration"},
		{`{"id":"x","colour":"red"}`, `unknown field "colour"`},
		{`{"id":"x","id":"y"}`, `"id" is given twice`},
		{`{"id":"x","payload":"a","payload":"b"}`, `"payload" is given twice`},
		{`{"ID":"x"}`, `unknown field "ID"`},
		{`{"id":"x","Max_Attempts":3}`, `unknown field "Max_Attempts"`},
		{`{"max_attempts":3}`, `"id" is required`},
		{`{"id":7}`, `"id" must be a string, got a number`},
		{`{"id":"x"} {"id":"y"}`, "more than one value"},
		{`[1,2]`, "malformed JSON"},
		{`{"id":"x",`, "malformed JSON"},
		{`{"id":"` + strings.Repeat("i", 300) + `"}`, "id must be at most 255 bytes"},
		{`{"id":"x","payload":"` + strings.Repeat("p", 2000) + `"}`, "payload"},
		{`{"id":"x","payload":"` + strings.Repeat("p", 70<<10) + `"}`, "longer than"},
	} {
		db := tempDB(t)
		code, out, e := cli(t, good+tc.line+"\n"+`{"id":"ok2"}`+"\n", "enqueue", "--db", db, "--max-payload", "1024")
		if code != exitUsage || !strings.Contains(e, tc.want) || !strings.Contains(e, "line 2") || !strings.Contains(e, "nothing was written") {
			t.Errorf("line %.60q: exit %d, stderr %q; want exit 2 naming line 2 and %q", tc.line, code, e, tc.want)
		}
		if out != "" {
			t.Errorf("line %.60q: wrote %q", tc.line, out)
		}
		if _, err := os.Stat(db); err == nil {
			if st := statsJSONOf(t, db); st.Pending != 0 {
				t.Errorf("line %.60q: %d jobs written", tc.line, st.Pending)
			}
		}
	}
	// Empty input.
	if code, _, e := cli(t, "\n\n", "enqueue", "--db", tempDB(t)); code != exitUsage || !strings.Contains(e, "no jobs") {
		t.Errorf("empty stdin: %d %q", code, e)
	}
}

func TestQueueFlagValidation(t *testing.T) {
	db := tempDB(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--db", db, "--id", "x", "--max-attempts", "0"}, "--max-attempts must be in"},
		{[]string{"enqueue", "--db", db, "--id", "x", "--max-attempts", "true"}, "invalid value"},
		{[]string{"enqueue", "--db", db, "--id", "x", "--max-attempts", "NaN"}, "invalid value"},
		{[]string{"enqueue", "--db", db, "--id", "x", "--deadline", "0s"}, "--deadline: duration must be in"},
		{[]string{"enqueue", "--db", db, "--id", "x", "--max-payload", "-1"}, "--max-payload must be in"},
		{[]string{"enqueue", "--db", db, "--id", "x", "--payload", "a", "--payload-file", "/dev/null"}, "not both"},
		{[]string{"run-once", "--db", db, "--exec", "true", "--lease", "-1s"}, "--lease must be in"},
		{[]string{"run-once", "--db", db, "--exec", "true", "--base", "2s", "--cap", "1s"}, "--cap (1s) must be >= --base (2s)"},
		{[]string{"run-once", "--db", db, "--exec", "true", "--timeout", "0s"}, "--timeout must be in"},
		{[]string{"run-once", "--db", db}, "give exactly one handler"},
		{[]string{"run-once", "--db", db, "--exec", "true", "--http", "http://x"}, "give exactly one handler"},
		{[]string{"run-once", "--db", db, "--http", "ftp://x"}, "--http must be an http"},
		{[]string{"run-once", "--db", db, "--http", "http://127.0.0.1:1", "--retry-status", "700"}, "--retry-status"},
		{[]string{"work", "--db", db, "--exec", "true", "--concurrency", "0"}, "--concurrency must be in"},
		{[]string{"work", "--db", db, "--exec", "true", "--rate", "NaN"}, "Limits.Rate must be"},
		{[]string{"work", "--db", db, "--exec", "true", "--max-in-flight", "-1"}, "Limits.MaxInFlight must be"},
		{[]string{"work", "--db", db, "--exec", "true", "--burst", "3"}, "Burst (3) needs a Rate"},
		{[]string{"work", "--db", db, "--exec", "true", "--rate", "true"}, "--rate"},
		{[]string{"work", "--db", db, "--exec", "true", "--batch", "5000"}, "--batch must be in"},
		{[]string{"work", "--db", db, "--exec", "true", "--poll", "-5ms"}, "--poll must be in"},
		{[]string{"work", "--db", db, "--exec", "true", "--grace", "0s"}, "--grace must be in"},
		{[]string{"dead", "--db", db, "--limit", "0"}, "--limit must be in"},
		{[]string{"requeue", "--db", db, "--id", "x", "--attempts", "-2", "--deadline", "1h"}, "--attempts must be in"},
		{[]string{"requeue", "--db", db, "--id", "x", "--attempts", "2"}, "--deadline is required"},
		{[]string{"work", "--db", db, "--exec", "true", "--log-format", "xml"}, "--log-format must be text or json"},
		{[]string{"work", "--db", db, "--exec", "true", "--retain-done", "soon"}, "--retain-done: \"soon\" is neither"},
		{[]string{"work", "--db", db, "--exec", "true", "--retain-dead", "0d"}, "--retain-dead: \"0d\" is not a whole number of days"},
		{[]string{"work", "--db", db, "--exec", "true", "--progress", "-1s"}, "--progress must be in"},
		{[]string{"stats", "--db", db, "--sqlite-sync", "OFF"}, "--sqlite-sync"},
		{[]string{"show", "--db", db}, "--id is required"},
		{[]string{"bogus"}, "unknown subcommand"},
	} {
		code, _, e := cli(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, e, tc.want)
		}
	}
}

func TestQueueHTTPHandler(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var bodies []string
	status := map[string]func(w http.ResponseWriter){
		"ok":   func(w http.ResponseWriter) { w.WriteHeader(204) },
		"busy": func(w http.ResponseWriter) { w.Header().Set("Retry-After", "7"); w.WriteHeader(503) },
		"teapot": func(w http.ResponseWriter) {
			w.WriteHeader(418)
			io.WriteString(w, "no coffee")
		},
		"slow": func(w http.ResponseWriter) { w.WriteHeader(429) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		bodies = append(bodies, string(b))
		mu.Unlock()
		if r.Method != http.MethodPost {
			w.WriteHeader(405)
			return
		}
		status[string(b)](w)
	}))
	defer srv.Close()
	db := tempDB(t)
	for _, id := range []string{"ok", "busy", "teapot", "slow"} {
		if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", id, "--payload", id, "--max-attempts", "5"); code != exitOK {
			t.Fatal(e)
		}
	}
	runOnce := func(extra ...string) {
		t.Helper()
		args := append([]string{"run-once", "--db", db, "--http", srv.URL, "--base", "10ms", "--cap", "10ms"}, extra...)
		if code, _, e := cli(t, "", args...); code != exitOK {
			t.Fatalf("run-once: %d %s", code, e)
		}
	}
	start := time.Now().UnixMilli()
	for range 3 {
		runOnce()
	}
	runOnce("--retry-status", "503") // 429 is not retryable for this endpoint
	end := time.Now().UnixMilli()
	if m := showJSON(t, db, "ok"); m["state"] != "done" {
		t.Fatalf("2xx: %v", m)
	}
	m := showJSON(t, db, "busy")
	at := int64(m["available_at_ms"].(float64))
	if m["state"] != "pending" || at < start+7000 || at > end+7000 || !strings.Contains(m["last_error"].(string), "503") {
		t.Fatalf("503 with Retry-After 7: %v (start %d)", m, start)
	}
	if m := showJSON(t, db, "teapot"); m["state"] != "dead" || m["dead_reason"] != "permanent" || !strings.Contains(m["last_error"].(string), "418 I'm a teapot: no coffee") {
		t.Fatalf("418: %v", m)
	}
	if m := showJSON(t, db, "slow"); m["state"] != "dead" || m["dead_reason"] != "permanent" {
		t.Fatalf("429 outside --retry-status: %v", m)
	}
	for i, k := range keys {
		if k != bodies[i] {
			t.Fatalf("Idempotency-Key %q for job %q", k, bodies[i])
		}
	}
}

func TestQueueHTTPConnectionErrorIsRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	db := tempDB(t)
	cli(t, "", "enqueue", "--db", db, "--id", "x", "--max-attempts", "3")
	if code, _, e := cli(t, "", "run-once", "--db", db, "--http", "http://"+addr+"/hook"); code != exitOK {
		t.Fatalf("run-once: %d %s", code, e)
	}
	if m := showJSON(t, db, "x"); m["state"] != "pending" || !strings.Contains(m["last_error"].(string), "refused") {
		t.Fatalf("connection refused: %v", m)
	}
}

func TestQueueHTTPTimeoutIsRetryable(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	db := tempDB(t)
	cli(t, "", "enqueue", "--db", db, "--id", "x", "--max-attempts", "3")
	if code, _, e := cli(t, "", "run-once", "--db", db, "--http", srv.URL, "--timeout", "100ms"); code != exitOK {
		t.Fatalf("run-once: %d %s", code, e)
	}
	if m := showJSON(t, db, "x"); m["state"] != "pending" || !strings.Contains(m["last_error"].(string), "deadline exceeded") {
		t.Fatalf("timeout: %v", m)
	}
}

func TestQueueExecHandler(t *testing.T) {
	db := tempDB(t)
	out := filepath.Join(t.TempDir(), "seen")
	for _, id := range []string{"a0", "b75", "c65", "d3"} {
		cli(t, "", "enqueue", "--db", db, "--id", id, "--payload", "payload-"+id, "--max-attempts", "5")
	}
	script := fmt.Sprintf(`cat >> %s; echo " $STAGGER_JOB_ID $STAGGER_ATTEMPT/$STAGGER_MAX_ATTEMPTS" >> %s; echo "stderr of $STAGGER_JOB_ID" >&2; exit "${STAGGER_JOB_ID#?}"`, out, out)
	codes := []int{}
	for range 4 {
		code, _, _ := cli(t, "", "run-once", "--db", db, "--exec", script)
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[0 0 0 1]" {
		t.Fatalf("exit codes %v; want the unknown exit 3 to fail run-once", codes)
	}
	seen, _ := os.ReadFile(out)
	for _, want := range []string{"payload-a0 a0 1/5", "payload-b75 b75 1/5", "payload-c65 c65 1/5", "payload-d3 d3 1/5"} {
		if !strings.Contains(string(seen), want) {
			t.Fatalf("command saw %q, want %q", seen, want)
		}
	}
	for id, want := range map[string][2]string{"a0": {"done", ""}, "b75": {"pending", ""}, "c65": {"dead", "permanent"}, "d3": {"leased", ""}} {
		m := showJSON(t, db, id)
		if m["state"] != want[0] || m["dead_reason"] != want[1] {
			t.Fatalf("%s: %v, want %v", id, m, want)
		}
		if id != "a0" && !strings.Contains(m["last_error"].(string), "stderr of "+id) {
			t.Fatalf("%s: last_error %q lacks the command's stderr", id, m["last_error"])
		}
	}
}

func TestQueueDeadAndRequeue(t *testing.T) {
	db := tempDB(t)
	cli(t, "", "enqueue", "--db", db, "--id", "p", "--max-attempts", "2")
	cli(t, "", "run-once", "--db", db, "--exec", "echo bad address >&2; exit 65")
	code, out, _ := cli(t, "", "dead", "--db", db)
	if code != exitOK || !strings.Contains(out, "p\tpermanent\tattempts 1/2") || !strings.Contains(out, "bad address") {
		t.Fatalf("dead: %d %q", code, out)
	}
	if code, _, e := cli(t, "", "requeue", "--db", db, "--id", "p", "--attempts", "3", "--deadline", "2h"); code != exitOK {
		t.Fatalf("requeue: %s", e)
	}
	m := showJSON(t, db, "p")
	if m["state"] != "pending" || m["attempts"].(float64) != 1 || m["max_attempts"].(float64) != 4 || m["dead_reason"] != "" {
		t.Fatalf("requeued: %v", m)
	}
	if code, _, e := cli(t, "", "requeue", "--db", db, "--id", "p", "--attempts", "1", "--deadline", "1h"); code != exitFail || !strings.Contains(e, `job "p" is not dead (state pending)`) {
		t.Fatalf("requeue of a pending job: %d %q", code, e)
	}
	st := statsJSONOf(t, db)
	if st.Pending != 1 || st.Dead.Permanent != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// At shutdown `queue work --exec` releases the job whose command it had to
// kill, as --http does: the failure is not judged and the job is pending
// again at once, not leased until its lease runs out.
func TestQueueExecReleasedAtShutdown(t *testing.T) {
	db := tempDB(t)
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "slow"); code != exitOK {
		t.Fatal(e)
	}
	started := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run(ctx, []string{"queue", "work", "--db", db, "--grace", "200ms", "--lease", "10m",
			"--exec", "touch " + started + "; exec sleep 600"}, io.Discard, &errOut)
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("queue work: exit %d: %s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("queue work did not stop")
	}
	m := showJSON(t, db, "slow")
	if m["state"] != "pending" {
		t.Fatalf("after shutdown the job is %v, want pending (released): %v", m["state"], m)
	}
	if le, _ := m["last_error"].(string); !strings.Contains(le, "released at shutdown") {
		t.Fatalf("last_error %q, want it to say the job was released at shutdown", le)
	}
}
