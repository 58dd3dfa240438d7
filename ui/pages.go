package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of what the pages read and show.
const (
	// MaxPayloadShown is how much of a job's payload its page shows.
	MaxPayloadShown = 4096
	// maxForm bounds the body of an action.
	maxForm = 16 << 10
	// deadLettersShown is how many dead letters each source lists.
	deadLettersShown = 100
	// maxQueuesShown bounds the queues kept from one overview.
	maxQueuesShown = 1000
	csrfCookie     = "stagger_csrf"
	opTimeout      = 10 * time.Second
)

// page is what every page template gets.
type page struct {
	Title    string
	Nav      []navItem
	ReadOnly bool
	CSRF     string
	Msg, Err string
	Scripts  []string
	Data     any
}

type navItem struct {
	Href, Label string
	On          bool
}

func (d *Dashboard) newPage(w http.ResponseWriter, r *http.Request, name, title string) *page {
	p := &page{Title: "stagger: " + title, ReadOnly: d.cfg.ReadOnly, CSRF: d.csrfToken(w, r)}
	add := func(href, label, key string) {
		p.Nav = append(p.Nav, navItem{href, label, key == name})
	}
	add("./", "dependencies", "index")
	if d.cfg.Queues != nil {
		add("queues", "queues", "queues")
		add("jobs", "jobs", "jobs")
	}
	if d.cfg.Queues != nil || len(d.cfg.DeadLetters) > 0 {
		add("dead", "dead letters", "dead")
	}
	if d.cfg.Proxy != "" {
		add("proxy", "proxy", "proxy")
	}
	if m := r.URL.Query().Get("done"); m != "" {
		p.Msg = doneMessages[m]
	}
	return p
}

// doneMessages are the confirmations a redirect after an action may ask
// for: a fixed set, so a link cannot put words on the page.
var doneMessages = map[string]string{
	"canceled":  "Canceled.",
	"requeued":  "Requeued: the job is due now.",
	"paused":    "Paused: workers claim nothing from the queue until it is resumed.",
	"resumed":   "Resumed.",
	"redriving": "Redrive started: see its progress below.",
}

func (d *Dashboard) render(w http.ResponseWriter, status int, name string, p *page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := d.page.ExecuteTemplate(w, name, p); err != nil {
		fmt.Fprintf(w, "<p>template error</p>")
	}
}

// fail shows an error page: the message, escaped, and a link back.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := d.newPage(w, r, "", http.StatusText(status))
	p.Msg = ""
	p.Err = msg
	d.render(w, status, "message", p)
}

// errStatus is the HTTP status of an error of a source.
func errStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// ---- CSRF: a random per-browser cookie and, in every form, its HMAC under
// the dashboard's key; plus the cross-origin check of net/http.

func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	v := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 43 {
		v = c.Value
	} else {
		var b [32]byte
		rand.Read(b[:])
		v = base64.RawURLEncoding.EncodeToString(b[:])
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: mountPath(r), HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	return d.sign(v)
}

func (d *Dashboard) sign(v string) string {
	m := hmac.New(sha256.New, d.csrfKey[:])
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF accepts a state-changing request only from a page of this
// dashboard: same origin (Sec-Fetch-Site, Origin), and the form's token
// matching the browser's cookie.
func (d *Dashboard) checkCSRF(r *http.Request) error {
	if err := d.origins.Check(r); err != nil {
		return errors.New("refused: the request came from another site (cross-origin)")
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return errors.New("refused: no CSRF cookie; reload the page and try again")
	}
	got := r.PostForm.Get("csrf")
	if got == "" {
		return errors.New("refused: the form has no CSRF token; reload the page and try again")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(d.sign(c.Value))) != 1 {
		return errors.New("refused: the CSRF token does not match; reload the page and try again")
	}
	return nil
}

// mountPath is the path the handler is mounted at (what http.StripPrefix
// took off), so the cookie goes back to every page of the dashboard.
func mountPath(r *http.Request) string {
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return "/"
	}
	p := strings.TrimSuffix(u.Path, r.URL.Path)
	if p == "" || !strings.HasPrefix(p, "/") {
		return "/"
	}
	return p + "/"
}

// ---- queues

func (d *Dashboard) queuesPage(w http.ResponseWriter, r *http.Request) {
	p := d.newPage(w, r, "queues", "queues")
	p.Scripts = []string{"live.js"}
	d.qmu.Lock()
	st := d.qstate
	d.qmu.Unlock()
	if st.T == 0 { // not sampled yet
		ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
		defer cancel()
		d.SampleQueues(ctx, time.Now())
		d.qmu.Lock()
		st = d.qstate
		d.qmu.Unlock()
	}
	if st.Error != "" {
		p.Err = st.Error
	}
	p.Data = st
	d.render(w, http.StatusOK, "queues", p)
}

// queueState is what the queues page and its event stream show.
type queueState struct {
	T        int64        `json:"t"`
	Queues   []QueueInfo  `json:"queues"`
	Redrives []RedriveRun `json:"redrives"`
	Error    string       `json:"error,omitempty"`
}

// RedriveRun is a redrive the dashboard started, running or finished.
type RedriveRun struct {
	Source  string  `json:"source"`
	Rate    float64 `json:"rate"`
	Started int64   `json:"started"` // Unix ms
	Running bool    `json:"running"`
	Moved   int     `json:"moved"`
	Skipped int     `json:"skipped"`
	Error   string  `json:"error,omitempty"`
}

// SampleQueues reads the queues' counts (Run calls it every Interval),
// works out throughput since the last sample and wakes the event
// streams. Without Config.Queues it does nothing.
func (d *Dashboard) SampleQueues(ctx context.Context, now time.Time) {
	if d.cfg.Queues == nil {
		return
	}
	qs, err := d.cfg.Queues.Overview(ctx)
	if len(qs) > maxQueuesShown {
		qs = qs[:maxQueuesShown]
	}
	d.qmu.Lock()
	st := queueState{T: now.UnixMilli(), Queues: qs}
	if err != nil {
		st.Error = "counting the queues: " + err.Error()
		st.Queues = d.qstate.Queues
	} else {
		prev := d.qprev
		d.qprev = make(map[string]int64, len(qs))
		secs := now.Sub(time.UnixMilli(d.qstate.T)).Seconds()
		for i := range qs {
			fin := qs[i].Done + qs[i].Dead
			d.qprev[qs[i].Name] = fin
			if p, ok := prev[qs[i].Name]; ok && secs > 0 && fin >= p {
				qs[i].Throughput = math.Round(float64(fin-p)/secs*100) / 100
			}
		}
	}
	st.Redrives = d.redriveRunsLocked()
	d.qstate = st
	d.qjson, _ = json.Marshal(st)
	d.qmu.Unlock()
	d.wake()
}

func (d *Dashboard) redriveRunsLocked() []RedriveRun {
	out := make([]RedriveRun, 0, len(d.redrives))
	for _, name := range d.redriveOrder {
		out = append(out, *d.redrives[name])
	}
	return out
}

// ---- jobs

func (d *Dashboard) jobsPage(w http.ResponseWriter, r *http.Request) {
	f, err := ParseJobFilter(r.URL.Query())
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, "bad filter: "+strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	jobs, next, err := d.cfg.Queues.Jobs(ctx, f)
	if err != nil {
		d.fail(w, r, errStatus(err), "listing jobs: "+err.Error())
		return
	}
	p := d.newPage(w, r, "jobs", "jobs")
	nextURL := ""
	if next != "" {
		q := f.Query()
		q.Set("after", next)
		nextURL = "jobs?" + q.Encode()
	}
	d.qmu.Lock()
	var queues []string
	for _, q := range d.qstate.Queues {
		queues = append(queues, q.Name)
	}
	d.qmu.Unlock()
	p.Data = struct {
		F       JobFilter
		Age     string
		States  []string
		Queues  []string
		Reasons []string
		Jobs    []JobInfo
		Next    string
		First   string
	}{f, ageText(f.OlderThan), States, queues, Reasons, jobs, nextURL, "jobs?" + f.Query().Encode()}
	d.render(w, http.StatusOK, "jobs", p)
}

func ageText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func (d *Dashboard) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := oneParam(r.URL.Query(), "id")
	if err == nil && id == "" {
		err = fmt.Errorf("%w: id is required (job?id=…)", ErrInvalid)
	}
	if err == nil {
		err = checkText("id", id)
	}
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	j, err := d.cfg.Queues.Job(ctx, id, MaxPayloadShown)
	if err != nil {
		d.fail(w, r, errStatus(err), err.Error())
		return
	}
	p := d.newPage(w, r, "job", "job "+clip(id))
	payload, binary := j.Payload, false
	if len(payload) > MaxPayloadShown {
		payload = payload[:MaxPayloadShown]
	}
	text := string(payload)
	if !utf8.Valid(payload) {
		binary = true
		text = strconv.QuoteToASCII(text)
	}
	paused := false
	d.qmu.Lock()
	for _, q := range d.qstate.Queues {
		if q.Name == j.Queue {
			paused = q.Paused
		}
	}
	d.qmu.Unlock()
	p.Data = struct {
		J       JobDetail
		Payload string
		Shown   int
		Binary  bool
		Paused  bool
	}{j, text, len(payload), binary, paused}
	d.render(w, http.StatusOK, "job", p)
}

func oneParam(q url.Values, k string) (string, error) {
	if v := q[k]; len(v) > 1 {
		return "", fmt.Errorf("%w: %s is given %d times, want once", ErrInvalid, k, len(v))
	} else if len(v) == 1 {
		return v[0], nil
	}
	return "", nil
}

// ---- dead letters

type deadRow struct {
	DeadLetter
	JobLink bool // a dead job of the queue: link to its page
}

func (d *Dashboard) deadPage(w http.ResponseWriter, r *http.Request) {
	p := d.newPage(w, r, "dead", "dead letters")
	p.Scripts = []string{"live.js"}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	var rows []deadRow
	var errs []string
	for i, s := range d.sources() {
		dls, err := s.List(ctx, deadLettersShown)
		if err != nil {
			errs = append(errs, s.Name()+": "+err.Error())
			continue
		}
		for _, x := range dls {
			x.Source = s.Name()
			rows = append(rows, deadRow{x, i == 0 && d.cfg.Queues != nil})
		}
	}
	p.Err = strings.Join(errs, "; ")
	d.qmu.Lock()
	runs := d.redriveRunsLocked()
	d.qmu.Unlock()
	var names []string
	for _, s := range d.sources() {
		names = append(names, s.Name())
	}
	p.Data = struct {
		Rows    []deadRow
		Sources []string
		Runs    []RedriveRun
		Shown   int
	}{rows, names, runs, deadLettersShown}
	d.render(w, http.StatusOK, "dead", p)
}

// sources are the dead-letter sources: the queue's first, then the
// configured ones.
func (d *Dashboard) sources() []DeadLetters {
	var out []DeadLetters
	if dl, ok := d.cfg.Queues.(interface{ DeadLetters() DeadLetters }); ok && d.cfg.Queues != nil {
		out = append(out, dl.DeadLetters())
	}
	return append(out, d.cfg.DeadLetters...)
}

// ---- actions

// act runs one action (POST act): cancel, requeue, pause, resume, redrive.
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request) {
	if d.cfg.ReadOnly {
		d.fail(w, r, http.StatusForbidden, "read-only dashboard: every action is refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			d.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("refused: an action's form is at most %d bytes", maxForm))
			return
		}
		d.fail(w, r, http.StatusBadRequest, "refused: the form does not parse")
		return
	}
	if err := d.checkCSRF(r); err != nil {
		d.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	op := r.PostForm.Get("op")
	if err := d.authorize(r, op); err != nil {
		d.denied(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	switch op {
	case "cancel", "requeue":
		if d.cfg.Queues == nil {
			d.fail(w, r, http.StatusNotFound, "no queue is configured")
			return
		}
		id := r.PostForm.Get("id")
		if err := checkText("id", id); err != nil || id == "" {
			d.fail(w, r, http.StatusBadRequest, "refused: id must be a job ID (1 to 255 bytes of UTF-8)")
			return
		}
		if !d.lock("job\x00" + id) {
			d.fail(w, r, http.StatusConflict, fmt.Sprintf("another action on job %q is in progress; nothing was done", clip(id)))
			return
		}
		defer d.unlock("job\x00" + id)
		var err error
		if op == "cancel" {
			_, err = d.cfg.Queues.Cancel(ctx, id, d.actor(r))
		} else {
			grant, deadline, gerr := grantOf(r.PostForm)
			if gerr != nil {
				d.fail(w, r, http.StatusBadRequest, gerr.Error())
				return
			}
			_, err = d.cfg.Queues.Requeue(ctx, id, grant, deadline, d.actor(r))
		}
		if err != nil {
			d.fail(w, r, errStatus(err), op+": "+err.Error())
			return
		}
		d.SampleQueues(ctx, time.Now())
		done := map[string]string{"cancel": "canceled", "requeue": "requeued"}[op]
		d.redirect(w, "job?"+url.Values{"id": {id}, "done": {done}}.Encode())
	case "pause", "resume":
		if d.cfg.Queues == nil {
			d.fail(w, r, http.StatusNotFound, "no queue is configured")
			return
		}
		q := r.PostForm.Get("queue")
		if !validQueue(q) {
			d.fail(w, r, http.StatusBadRequest, "refused: queue must be 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'")
			return
		}
		if err := d.cfg.Queues.SetPaused(ctx, q, op == "pause", d.actor(r)); err != nil {
			d.fail(w, r, errStatus(err), op+" "+q+": "+err.Error())
			return
		}
		d.SampleQueues(ctx, time.Now())
		back := "queues"
		if id := r.PostForm.Get("id"); id != "" && checkText("id", id) == nil {
			back = "job?" + url.Values{"id": {id}}.Encode() + "&"
		} else {
			back += "?"
		}
		d.redirect(w, back+"done="+op+"d")
	case "redrive":
		d.redrive(w, r)
	default:
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("refused: op must be cancel, requeue, pause, resume or redrive, got %q", clip(op)))
	}
}

// redirect sends the browser to a page of the dashboard by a relative URL
// (the handler does not know where it is mounted).
func (d *Dashboard) redirect(w http.ResponseWriter, rel string) {
	w.Header().Set("Location", rel)
	w.WriteHeader(http.StatusSeeOther)
}

// lock marks key busy; false when it already is.
func (d *Dashboard) lock(key string) bool {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if d.busy[key] {
		return false
	}
	d.busy[key] = true
	return true
}

func (d *Dashboard) unlock(key string) {
	d.qmu.Lock()
	delete(d.busy, key)
	d.qmu.Unlock()
}

func (d *Dashboard) redrive(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	name := f.Get("source")
	var src DeadLetters
	for _, s := range d.sources() {
		if s.Name() == name {
			src = s
		}
	}
	if src == nil {
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("refused: no dead-letter source called %q", clip(name)))
		return
	}
	rd, err := redriveOf(f)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	rd.Actor = d.actor(r)
	if rd.DryRun {
		ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
		defer cancel()
		var sel []DeadLetter
		res, err := src.Redrive(ctx, rd, func(x DeadLetter) {
			if len(sel) < 1000 {
				sel = append(sel, x)
			}
		})
		p := d.newPage(w, r, "dead", "redrive dry run")
		if err != nil {
			p.Err = "dry run: " + err.Error()
		}
		p.Data = struct {
			Source string
			R      Redrive
			Res    RedriveResult
			Sel    []DeadLetter
		}{name, rd, res, sel}
		d.render(w, http.StatusOK, "dryrun", p)
		return
	}
	d.qmu.Lock()
	if run := d.redrives[name]; run != nil && run.Running {
		d.qmu.Unlock()
		d.fail(w, r, http.StatusConflict, fmt.Sprintf("a redrive of %s is already running (%d moved so far); nothing was started", name, run.Moved))
		return
	}
	run := &RedriveRun{Source: name, Rate: rd.Rate, Started: time.Now().UnixMilli(), Running: true}
	if d.redrives[name] == nil {
		d.redriveOrder = append(d.redriveOrder, name)
	}
	d.redrives[name] = run
	d.qmu.Unlock()
	go d.runRedrive(src, rd, run)
	d.redirect(w, "dead?done=redriving")
}

func (d *Dashboard) runRedrive(src DeadLetters, rd Redrive, run *RedriveRun) {
	d.qmu.Lock()
	ctx := d.ctx
	d.qmu.Unlock()
	var last time.Time
	res, err := src.Redrive(ctx, rd, func(DeadLetter) {
		d.qmu.Lock()
		run.Moved++
		d.qmu.Unlock()
		// The counts follow the redrive, at most four times a second
		// (a fast redrive must not count the queues once per job).
		if now := time.Now(); now.Sub(last) >= 250*time.Millisecond {
			last = now
			d.SampleQueues(ctx, now)
		}
	})
	d.qmu.Lock()
	run.Running = false
	run.Moved, run.Skipped = res.Moved, res.Skipped
	if err != nil {
		run.Error = err.Error()
	}
	d.qmu.Unlock()
	d.SampleQueues(ctx, time.Now())
}

// Defaults of a requeue's grant.
const (
	DefaultGrant    = 3
	DefaultDeadline = 24 * time.Hour
)

// redriveOf reads a redrive form: reason, rate (default 10 per second),
// limit, dry, and the requeue's attempts and deadline.
func redriveOf(f url.Values) (Redrive, error) {
	rd := Redrive{Reason: strings.TrimSpace(f.Get("reason")), Rate: 10, DryRun: f.Get("dry") != ""}
	var err error
	if rd.Grant, rd.Deadline, err = grantOf(f); err != nil {
		return rd, err
	}
	if rd.Reason != "" && !validReason(rd.Reason) {
		return rd, errors.New("refused: reason must be 1 to 64 lower-case letters, digits or '_' (such as exhausted)")
	}
	if v := strings.TrimSpace(f.Get("rate")); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0 && x <= MaxRedriveRate) {
			return rd, fmt.Errorf("refused: rate must be a number of dead letters per second in (0, %d], got %q", MaxRedriveRate, clip(v))
		}
		rd.Rate = x
	}
	if v := strings.TrimSpace(f.Get("limit")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return rd, fmt.Errorf("refused: limit must be a whole number from 0 (all) to 1000000, got %q", clip(v))
		}
		rd.Limit = n
	}
	return rd, nil
}

// grantOf reads a requeue's attempts and deadline from a form.
func grantOf(f url.Values) (int, time.Duration, error) {
	grant, deadline := DefaultGrant, DefaultDeadline
	if v := strings.TrimSpace(f.Get("attempts")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return 0, 0, fmt.Errorf("refused: attempts (granted) must be a whole number from 1 to 1000000, got %q", clip(v))
		}
		grant = n
	}
	if v := strings.TrimSpace(f.Get("deadline")); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x < time.Second || x > maxAge {
			return 0, 0, fmt.Errorf("refused: deadline must be a duration from 1s to 100 years, such as 1h or 24h, got %q", clip(v))
		}
		deadline = x
	}
	return grant, deadline, nil
}

// actor is who acts, as recorded in a job's history: Config.Actor's
// answer, else the Basic authentication user, else "ui".
func (d *Dashboard) actor(r *http.Request) string {
	if d.cfg.Actor != nil {
		if a := d.cfg.Actor(r); a != "" {
			return a
		}
	}
	if u, _, ok := r.BasicAuth(); ok && u != "" && checkText("user", u) == nil && len(u) <= 120 {
		return "ui:" + u
	}
	return "ui"
}

// ---- authorization

func (d *Dashboard) authorize(r *http.Request, action string) error {
	if d.cfg.Authorize == nil {
		return nil
	}
	return d.cfg.Authorize(r, action)
}

func (d *Dashboard) denied(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrUnauthorized) {
		w.Header().Set("WWW-Authenticate", `Basic realm="stagger", charset="UTF-8"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
}

// BasicAuth returns a Config.Authorize that lets in the requests that
// carry user and password by HTTP Basic authentication (compared in
// constant time) and asks the others for them. Serve it over TLS or on
// loopback only.
func BasicAuth(user, password string) func(*http.Request, string) error {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(r *http.Request, _ string) error {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if ok && subtle.ConstantTimeCompare(gotU[:], wantU[:])&subtle.ConstantTimeCompare(gotP[:], wantP[:]) == 1 {
			return nil
		}
		return ErrUnauthorized
	}
}

// Reasons are the dead reasons of the queue, for the filter.
var Reasons = []string{"exhausted", "deadline", "permanent", "canceled"}

// ---- template helpers

var funcs = template.FuncMap{
	"ms": func(t int64) string {
		if t == 0 {
			return "–"
		}
		return time.UnixMilli(t).UTC().Format("2006-01-02 15:04:05Z")
	},
	"lag": func(ms int64) string {
		return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
	},
	"canCancel":  func(s string) bool { return s == "pending" },
	"canRequeue": func(s string) bool { return s == "dead" },
	"grant":      func() int { return DefaultGrant },
	"f2": func(p *float64) string {
		if p == nil {
			return "–"
		}
		return strconv.FormatFloat(*p, 'f', 2, 64)
	},
	"intp": func(p *int) string {
		if p == nil {
			return "–"
		}
		return strconv.Itoa(*p)
	},
	"deadline": func() string { return "24h" },
}
