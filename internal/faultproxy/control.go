package faultproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/staggerhq/stagger/internal/labkit"
)

// Limits of the control API.
const (
	// MaxControlBody bounds a request body: a clause with the largest
	// status body fits.
	MaxControlBody = 128 << 10
	// MaxProxies bounds the proxies of one process.
	MaxProxies = 64
)

// ErrBadRequest wraps every error a caller's input caused; ErrNoProxy an
// unknown proxy name.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNoProxy    = errors.New("no such proxy")
	errNotTracked = errors.New("not tracked")
)

func errorf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, a...)...)
}

// Control is the control API: named proxies (listen -> upstream) and their
// faults, counts and timelines over HTTP and JSON, as toxiproxy's API on
// :8474 does. It is safe for concurrent use.
type Control struct {
	start func(Config) (Proxy, error)

	mu      sync.Mutex
	proxies map[string]Proxy
	order   []string
	owned   map[string]bool // started through the API (or Start): closed by Remove and Close
}

// NewControl returns a control API with no proxies. start starts a proxy
// for POST /proxies; nil starts StartHTTP or StartTCP by cfg.Kind.
func NewControl(start func(Config) (Proxy, error)) *Control {
	if start == nil {
		start = Start
	}
	return &Control{start: start, proxies: map[string]Proxy{}, owned: map[string]bool{}}
}

// Start starts an HTTP or a TCP proxy by cfg.Kind.
func Start(cfg Config) (Proxy, error) {
	switch cfg.Kind {
	case "", "http":
		return StartHTTP(cfg)
	case "tcp":
		return StartTCP(cfg)
	}
	return nil, errorf("kind %q: want http or tcp", cfg.Kind)
}

// Add registers a proxy started elsewhere; the first one added is the
// default of /faults and /stats. Close does not close it.
func (c *Control) Add(p Proxy) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addLocked(p)
}

func (c *Control) addLocked(p Proxy) error {
	if !labkit.ValidFaultName(p.Name()) {
		return errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", p.Name(), labkit.MaxFaultName)
	}
	if _, ok := c.proxies[p.Name()]; ok {
		return fmt.Errorf("%w: a proxy called %q exists", ErrExists, p.Name())
	}
	if len(c.proxies) >= MaxProxies {
		return fmt.Errorf("%w: at most %d proxies", ErrFull, MaxProxies)
	}
	c.proxies[p.Name()] = p
	c.order = append(c.order, p.Name())
	return nil
}

// StartProxy starts a proxy for cfg and registers it.
func (c *Control) StartProxy(cfg Config) (Proxy, error) {
	if !labkit.ValidFaultName(cfg.Name) {
		return nil, errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", cfg.Name, labkit.MaxFaultName)
	}
	if cfg.Upstream == "" {
		return nil, errorf("upstream: required")
	}
	c.mu.Lock()
	_, taken := c.proxies[cfg.Name]
	full := len(c.proxies) >= MaxProxies
	c.mu.Unlock()
	switch {
	case taken:
		return nil, fmt.Errorf("%w: a proxy called %q exists", ErrExists, cfg.Name)
	case full:
		return nil, fmt.Errorf("%w: at most %d proxies", ErrFull, MaxProxies)
	}
	p, err := c.start(cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.addLocked(p); err != nil {
		p.Close()
		return nil, err
	}
	c.owned[p.Name()] = true
	return p, nil
}

// Proxy returns the proxy called name; "" is the default one.
func (c *Control) Proxy(name string) (Proxy, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name == "" {
		if len(c.order) == 0 {
			return nil, fmt.Errorf("%w: there is no proxy; start one with POST /proxies", ErrNoProxy)
		}
		name = c.order[0]
	}
	p, ok := c.proxies[name]
	if !ok {
		return nil, fmt.Errorf("%w: no proxy called %q (GET /proxies lists them)", ErrNoProxy, name)
	}
	return p, nil
}

// Remove stops and forgets the proxy called name.
func (c *Control) Remove(name string) error {
	c.mu.Lock()
	p, ok := c.proxies[name]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("%w: no proxy called %q (GET /proxies lists them)", ErrNoProxy, name)
	}
	delete(c.proxies, name)
	c.order = removeString(c.order, name)
	owned := c.owned[name]
	delete(c.owned, name)
	c.mu.Unlock()
	if owned {
		return p.Close()
	}
	return nil
}

// Close closes the proxies the API started.
func (c *Control) Close() {
	c.mu.Lock()
	var ps []Proxy
	for n := range c.owned {
		ps = append(ps, c.proxies[n])
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

func removeString(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// ProxyInfo is a proxy as GET /proxies shows it.
type ProxyInfo struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind"`
	Listen   string       `json:"listen"`
	Upstream string       `json:"upstream"`
	Faults   []FaultCount `json:"faults"`
}

func info(p Proxy) ProxyInfo {
	return ProxyInfo{Name: p.Name(), Kind: p.Kind(), Listen: p.Addr(), Upstream: p.Upstream(), Faults: p.Faults().Counts()}
}

// RequestAttempts is the answer of GET /stats/requests/{id}.
type RequestAttempts struct {
	ID       string `json:"id"`
	Attempts int    `json:"attempts"`
}

// FaultRequest is the body of POST /faults and PUT /faults/{name}; a body
// that does not start with '{' is the clause itself.
type FaultRequest struct {
	Name   string `json:"name,omitempty"`
	Clause string `json:"clause"`
}

// Handler returns the control API:
//
//	GET    /proxies                  the proxies and their faults
//	POST   /proxies                  {"name","listen","upstream","kind"}: start one
//	GET    /proxies/{proxy}          one proxy
//	DELETE /proxies/{proxy}          stop it
//	GET    /faults                   the faults with their counts
//	POST   /faults                   {"clause","name"} or the clause: add one
//	GET    /faults/{name}            one fault
//	PUT    /faults/{name}            replace it (or add it), counts kept
//	DELETE /faults/{name}            remove it
//	GET    /schedule                 the fault schedule's clauses (HTTP)
//	POST   /schedule                 {"clause","name"} or the clause: add one
//	GET    /schedule/{name}          one clause
//	PUT    /schedule/{name}          replace it (or add it)
//	DELETE /schedule/{name}          remove it
//	GET    /stats                    the counts (?timeline=1: and the windows)
//	GET    /stats/requests/{id}      the attempts of one logical request
//	POST   /stats/reset              start the counts afresh
//
// /faults, /schedule and /stats act on the default proxy (the first) or
// on ?proxy=NAME; /proxies/{proxy}/faults… (and …/schedule…, …/stats…)
// are the same for a named one.
func (c *Control) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /proxies", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		out := []ProxyInfo{}
		for _, n := range c.order {
			out = append(out, info(c.proxies[n]))
		}
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /proxies", func(w http.ResponseWriter, r *http.Request) {
		var cfg Config
		if !readJSON(w, r, &cfg) {
			return
		}
		p, err := c.StartProxy(cfg)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, info(p))
	})
	mux.HandleFunc("GET /proxies/{proxy}", func(w http.ResponseWriter, r *http.Request) {
		if p, ok := c.lookup(w, r.PathValue("proxy")); ok {
			writeJSON(w, http.StatusOK, info(p))
		}
	})
	mux.HandleFunc("DELETE /proxies/{proxy}", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Remove(r.PathValue("proxy")); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, prefix := range []string{"", "/proxies/{proxy}"} {
		mux.HandleFunc("GET "+prefix+"/faults", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			writeJSON(w, http.StatusOK, p.Faults().Counts())
		}))
		mux.HandleFunc("POST "+prefix+"/faults", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			f, ok := readFault(w, r, p.Faults(), "")
			if !ok {
				return
			}
			name, err := p.Faults().Add(f)
			if err != nil {
				writeErr(w, err)
				return
			}
			got, _ := p.Faults().Get(name)
			w.Header().Set("Location", "/faults/"+name)
			writeJSON(w, http.StatusCreated, got)
		}))
		mux.HandleFunc("GET "+prefix+"/faults/{name}", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			got, err := p.Faults().Get(r.PathValue("name"))
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, got)
		}))
		mux.HandleFunc("PUT "+prefix+"/faults/{name}", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			name := r.PathValue("name")
			if !labkit.ValidFaultName(name) {
				writeErr(w, errorf("fault name %q: want 1 to %d letters, digits, '-', '_' or '.'", name, labkit.MaxFaultName))
				return
			}
			f, ok := readFault(w, r, p.Faults(), name)
			if !ok {
				return
			}
			added, err := p.Faults().Put(name, f)
			if err != nil {
				writeErr(w, err)
				return
			}
			got, _ := p.Faults().Get(name)
			code := http.StatusOK
			if added {
				code = http.StatusCreated
			}
			writeJSON(w, code, got)
		}))
		mux.HandleFunc("DELETE "+prefix+"/faults/{name}", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			if err := p.Faults().Remove(r.PathValue("name")); err != nil {
				writeErr(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		mux.HandleFunc("GET "+prefix+"/schedule", c.withSchedule(func(w http.ResponseWriter, r *http.Request, s *Schedule) {
			writeJSON(w, http.StatusOK, s.List())
		}))
		mux.HandleFunc("POST "+prefix+"/schedule", c.withSchedule(func(w http.ResponseWriter, r *http.Request, s *Schedule) {
			req, ok := readClause(w, r, "")
			if !ok {
				return
			}
			name, err := s.Add(req.Name, req.Clause)
			if err != nil {
				writeErr(w, err)
				return
			}
			got, _ := s.Get(name)
			w.Header().Set("Location", "/schedule/"+name)
			writeJSON(w, http.StatusCreated, got)
		}))
		mux.HandleFunc("GET "+prefix+"/schedule/{name}", c.withSchedule(func(w http.ResponseWriter, r *http.Request, s *Schedule) {
			got, err := s.Get(r.PathValue("name"))
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, got)
		}))
		mux.HandleFunc("PUT "+prefix+"/schedule/{name}", c.withSchedule(func(w http.ResponseWriter, r *http.Request, s *Schedule) {
			name := r.PathValue("name")
			req, ok := readClause(w, r, name)
			if !ok {
				return
			}
			added, err := s.Put(name, req.Clause)
			if err != nil {
				writeErr(w, err)
				return
			}
			got, _ := s.Get(name)
			code := http.StatusOK
			if added {
				code = http.StatusCreated
			}
			writeJSON(w, code, got)
		}))
		mux.HandleFunc("DELETE "+prefix+"/schedule/{name}", c.withSchedule(func(w http.ResponseWriter, r *http.Request, s *Schedule) {
			if err := s.Remove(r.PathValue("name")); err != nil {
				writeErr(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		mux.HandleFunc("GET "+prefix+"/stats", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			writeJSON(w, http.StatusOK, p.Stats(r.URL.Query().Get("timeline") == "1"))
		}))
		mux.HandleFunc("GET "+prefix+"/stats/requests/{id}", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			rc, ok := p.(RequestCounter)
			if !ok {
				writeErr(w, fmt.Errorf("%w: proxy %q keeps no per-request counts; read max_attempts in /stats", errNotTracked, p.Name()))
				return
			}
			id := r.PathValue("id")
			n, ok := rc.Attempts(id)
			if !ok {
				writeErr(w, fmt.Errorf("%w: no attempt carried request ID %q", errNotTracked, id))
				return
			}
			writeJSON(w, http.StatusOK, RequestAttempts{ID: id, Attempts: n})
		}))
		mux.HandleFunc("POST "+prefix+"/stats/reset", c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
			p.ResetStats()
			w.WriteHeader(http.StatusNoContent)
		}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": r.Method + " " + r.URL.Path + ": method not allowed; want " + strings.Join(allow, ", ")})
			return
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no route " + r.Method + " " + r.URL.Path +
			"; the routes: /proxies, /proxies/{proxy}, /faults, /faults/{name}, /schedule, /schedule/{name}, /stats, /stats/reset (see docs/proxy.md)"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

func (c *Control) lookup(w http.ResponseWriter, name string) (Proxy, bool) {
	p, err := c.Proxy(name)
	if err != nil {
		writeErr(w, err)
		return nil, false
	}
	return p, true
}

// withProxy finds the proxy of /proxies/{proxy}/… or ?proxy=NAME.
func (c *Control) withProxy(h func(http.ResponseWriter, *http.Request, Proxy)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("proxy")
		if name == "" {
			name = r.URL.Query().Get("proxy")
		}
		if p, ok := c.lookup(w, name); ok {
			h(w, r, p)
		}
	}
}

// withSchedule finds the proxy as withProxy does and hands on its fault
// schedule; a proxy without one (TCP) is a 400.
func (c *Control) withSchedule(h func(http.ResponseWriter, *http.Request, *Schedule)) http.HandlerFunc {
	return c.withProxy(func(w http.ResponseWriter, r *http.Request, p Proxy) {
		sp, ok := p.(Scheduler)
		if !ok {
			writeErr(w, fmt.Errorf("%w: proxy %q (%s) has no fault schedule; its faults are at /faults", ErrKind, p.Name(), p.Kind()))
			return
		}
		h(w, r, sp.Schedule())
	})
}

// readClause reads a FaultRequest (or a bare clause) for the schedule;
// name, when not "", is the clause's name from the path.
func readClause(w http.ResponseWriter, r *http.Request, name string) (FaultRequest, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return FaultRequest{}, false
	}
	req, err := ParseScheduleRequest(body, name)
	if err != nil {
		writeErr(w, err)
		return FaultRequest{}, false
	}
	return req, true
}

// ParseScheduleRequest reads the body of POST /schedule or PUT
// /schedule/{name}: {"clause", "name"}, or the clause itself when it does
// not start with '{'. pathName, when not "", is the name in the path,
// which a name in the body must repeat. The clause comes back in normal
// form, and the name as given ("" for POST without one).
func ParseScheduleRequest(body []byte, pathName string) (FaultRequest, error) {
	req, err := parseClauseBody(body)
	if err != nil {
		return FaultRequest{}, err
	}
	switch {
	case req.Name != "" && !labkit.ValidFaultName(req.Name):
		return FaultRequest{}, errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", req.Name, labkit.MaxFaultName)
	case pathName != "" && !labkit.ValidFaultName(pathName):
		return FaultRequest{}, errorf("schedule clause name %q: want 1 to %d letters, digits, '-', '_' or '.'", pathName, labkit.MaxFaultName)
	case pathName != "" && req.Name != "" && req.Name != pathName:
		return FaultRequest{}, errorf("name: the body names another clause than the path's %q", pathName)
	}
	if req.Clause, err = ParseScheduleClause(req.Clause); err != nil {
		return FaultRequest{}, err
	}
	return req, nil
}

// parseClauseBody reads {"clause", "name"}, or a body that does not start
// with '{' as the clause itself.
func parseClauseBody(body []byte) (FaultRequest, error) {
	var req FaultRequest
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		if err := decodeJSON(t, &req); err != nil {
			return FaultRequest{}, err
		}
	} else {
		req.Clause = string(t)
	}
	return req, nil
}

// readFault reads a FaultRequest (or a bare clause) and parses its clause
// for set; name, when not "", is the fault's name from the path.
func readFault(w http.ResponseWriter, r *http.Request, set *Set, name string) (labkit.Fault, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return labkit.Fault{}, false
	}
	req, err := parseClauseBody(body)
	if err != nil {
		writeErr(w, err)
		return labkit.Fault{}, false
	}
	if strings.TrimSpace(req.Clause) == "" {
		writeErr(w, errorf("clause: required, such as \"status 503 p=0.5\" (%s)", labkit.RuntimeFaultGrammar))
		return labkit.Fault{}, false
	}
	f, err := set.Parse(req.Clause)
	if err != nil {
		writeErr(w, errorf("clause: %v", err))
		return labkit.Fault{}, false
	}
	switch {
	case req.Name != "" && !labkit.ValidFaultName(req.Name):
		writeErr(w, errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", req.Name, labkit.MaxFaultName))
		return labkit.Fault{}, false
	case req.Name != "" && f.Name != "" && req.Name != f.Name:
		writeErr(w, errorf("name %q and the clause's name=%s differ: give one", req.Name, f.Name))
		return labkit.Fault{}, false
	case name != "" && (req.Name != "" && req.Name != name || f.Name != "" && f.Name != name):
		writeErr(w, errorf("name: the body names another fault than the path's %q", name))
		return labkit.Fault{}, false
	}
	if req.Name != "" {
		f.Name = req.Name
	}
	return f, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxControlBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("request body: over the limit of %d bytes", MaxControlBody)})
		} else {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "request body: " + err.Error()})
		}
		return nil, false
	}
	return b, true
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, ok := readBody(w, r)
	if !ok {
		return false
	}
	if err := decodeJSON(b, v); err != nil {
		writeErr(w, err)
		return false
	}
	return true
}

// decodeJSON reads exactly one JSON object into v, unknown fields refused;
// the error names the field.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case err == nil:
		if _, err := dec.Token(); err != io.EOF { // More misses a stray '}' or ']'
			return errorf("request body: one JSON object, got more after it")
		}
		return nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf("request body: malformed JSON: it ends early")
	case errors.Is(err, io.EOF):
		return errorf("request body: empty; want a JSON object")
	case errors.As(err, &te):
		return errorf("field %q: want a %s, got a JSON %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return errorf("request body: malformed JSON at byte %d: %v", se.Offset, se)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return errorf("request body: %v", err)
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNoFault), errors.Is(err, ErrNoProxy), errors.Is(err, errNotTracked), errors.Is(err, ErrNoClause):
		code = http.StatusNotFound
	case errors.Is(err, ErrExists), errors.Is(err, ErrClauseExists):
		code = http.StatusConflict
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrKind), errors.Is(err, ErrFull):
		code = http.StatusBadRequest
	}
	msg := err.Error()
	for _, e := range []error{ErrBadRequest, ErrNoProxy, errNotTracked} {
		msg = strings.TrimPrefix(msg, e.Error()+": ")
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "<=" in a message stays readable
	enc.Encode(v)
}
