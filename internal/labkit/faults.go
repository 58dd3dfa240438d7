package labkit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every validation error of this package; the
// message names the field and the rule it broke.
var ErrInvalid = errors.New("lab: invalid configuration")

// Span is a stretch [From, To) of a gateway's timeline, measured from the
// gateway's start.
type Span struct {
	From, To time.Duration // start (inclusive) and end (exclusive); 0 <= From < To
}

// Contains reports whether t falls inside the span.
func (s Span) Contains(t time.Duration) bool { return t >= s.From && t < s.To }

// Slow is a slow phase: inside the span the gateway's latency grows linearly
// from Latency (no extra) at From to Latency+Extra just before To; after To it
// is back to Latency. The dependency does not fail — it gets slower, which
// is what turns timeouts and retries into an outage.
type Slow struct {
	Span                // when the phase lasts
	Extra time.Duration // latency added by the end of the span; >= 0
}

// Flap alternates inside its span: down for Down, then up for Up, then down
// again, starting down at From.
type Flap struct {
	Span                   // when the gateway flaps
	Down, Up time.Duration // length of each down and each up phase; both > 0
}

// Faults is a gateway's scripted timeline. The zero value is a healthy
// gateway that answers at once.
type Faults struct {
	// Down lists outages: an attempt arriving inside any of them is
	// refused with 503 (Outcome Down).
	Down []Span
	// Latency is how long the gateway takes to answer an accepted or a down
	// attempt. It is the dependency's round trip as the callers see it, on
	// top of the loopback's own (a fraction of a millisecond).
	Latency time.Duration
	// Capacity, when > 0, caps the attempts in flight: one arriving while
	// Capacity attempts are being served is refused at once with 503
	// (Outcome Busy), without waiting out Latency.
	Capacity int
	// Slow lists slow phases (latency growing over a span).
	Slow []Slow
	// Flap lists flapping phases.
	Flap []Flap
	// RetryAfter, when > 0, is sent as a Retry-After header (whole seconds,
	// rounded up) with every refusal.
	RetryAfter time.Duration
}

// Outage returns a gateway down from the start for d, answering after
// latency: the timeline of [FourCallerOutage].
func Outage(d, latency time.Duration) Faults {
	f := Faults{Latency: latency}
	if d > 0 {
		f.Down = []Span{{From: 0, To: d}}
	}
	return f
}

// Validate checks every field and names the first one that is wrong.
func (f Faults) Validate() error {
	span := func(name string, s Span) error {
		switch {
		case s.From < 0:
			return fmt.Errorf("%w: %s.From must be >= 0, got %v", ErrInvalid, name, s.From)
		case s.To <= s.From:
			return fmt.Errorf("%w: %s.To (%v) must be after From (%v)", ErrInvalid, name, s.To, s.From)
		}
		return nil
	}
	for i, s := range f.Down {
		if err := span(fmt.Sprintf("Faults.Down[%d]", i), s); err != nil {
			return err
		}
	}
	switch {
	case f.Latency < 0:
		return fmt.Errorf("%w: Faults.Latency must be >= 0, got %v", ErrInvalid, f.Latency)
	case f.Capacity < 0:
		return fmt.Errorf("%w: Faults.Capacity must be >= 0 (0 means no cap), got %d", ErrInvalid, f.Capacity)
	case f.RetryAfter < 0:
		return fmt.Errorf("%w: Faults.RetryAfter must be >= 0, got %v", ErrInvalid, f.RetryAfter)
	}
	for i, s := range f.Slow {
		name := fmt.Sprintf("Faults.Slow[%d]", i)
		if err := span(name, s.Span); err != nil {
			return err
		}
		if s.Extra < 0 {
			return fmt.Errorf("%w: %s.Extra must be >= 0, got %v", ErrInvalid, name, s.Extra)
		}
	}
	for i, fl := range f.Flap {
		name := fmt.Sprintf("Faults.Flap[%d]", i)
		if err := span(name, fl.Span); err != nil {
			return err
		}
		if fl.Down <= 0 || fl.Up <= 0 {
			return fmt.Errorf("%w: %s.Down and .Up must be > 0, got %v and %v", ErrInvalid, name, fl.Down, fl.Up)
		}
	}
	return nil
}

// IsDown reports whether the timeline has the gateway down at t.
func (f Faults) IsDown(t time.Duration) bool {
	for _, s := range f.Down {
		if s.Contains(t) {
			return true
		}
	}
	for _, fl := range f.Flap {
		if fl.Contains(t) && (t-fl.From)%(fl.Down+fl.Up) < fl.Down {
			return true
		}
	}
	return false
}

// LatencyAt returns the latency of an answer to an attempt arriving at t:
// Latency plus the extra of every slow phase t falls in.
func (f Faults) LatencyAt(t time.Duration) time.Duration {
	d := f.Latency
	for _, s := range f.Slow {
		if s.Contains(t) {
			// Linear growth, computed in float64 to avoid overflowing
			// Extra·elapsed for long spans.
			frac := float64(t-s.From) / float64(s.To-s.From)
			d += time.Duration(frac * float64(s.Extra))
		}
	}
	return d
}

// Decide returns what the gateway does with an attempt that arrives at t
// while inFlight others are being served: its outcome and how long to wait
// before answering. A full gateway answers Busy at once; a down one Down
// after the latency; otherwise Accepted after the latency.
func (f Faults) Decide(t time.Duration, inFlight int) (Outcome, time.Duration) {
	if f.Capacity > 0 && inFlight >= f.Capacity {
		return Busy, 0
	}
	lat := f.LatencyAt(t)
	if f.IsDown(t) {
		return Down, lat
	}
	return Accepted, lat
}

// End returns the time the last scripted fault ends (0 for none).
func (f Faults) End() time.Duration {
	var end time.Duration
	for _, s := range f.Down {
		end = max(end, s.To)
	}
	for _, s := range f.Slow {
		end = max(end, s.To)
	}
	for _, s := range f.Flap {
		end = max(end, s.To)
	}
	return end
}

// The runtime fault grammar: one fault per clause, with a name, a
// probability and (HTTP) a match, added and removed while a proxy runs
// (`stagger proxy --fault` and its control API, package proxytest). The
// first word is the kind, the words after it key=value options:
//
//	status CODE [retry-after=D | retry-after=date:D] [body=TEXT]   HTTP: answer CODE (400-599) instead of forwarding
//	delay D [jitter=J]          HTTP: wait D±J before forwarding
//	cut N                       HTTP: forward, then close the connection after N bytes of the response body
//	reset                       HTTP: reset the connection (TCP RST), no answer
//	latency D [jitter=J]        TCP: hold each chunk of data D±J
//	bandwidth RATE              TCP: at most RATE bytes a second (1024, 64KB, 2MB)
//	slow-close D                TCP: wait D before passing a close on
//	timeout D                   TCP: pass no data; close after D (0: hold for ever)
//	slicer N [delay=D]          TCP: write data in slices of at most N bytes, D apart
//	limit-data N                TCP: close the connection once N bytes have passed
//	reset-peer [D]              TCP: reset the connection after D (default at once)
//
// Options of every kind: p=F (the probability it applies, toxiproxy's
// toxicity, 0 to 1; default 1), name=NAME. HTTP kinds: method=METHOD,
// path=/PREFIX, header=NAME or header=NAME:VALUE (all given must match).
// TCP kinds: dir=down (upstream to client, the default), up or both. A
// value may be double-quoted with Go escapes: body="try later".
const RuntimeFaultGrammar = `status CODE [retry-after=D|retry-after=date:D] [body=TEXT]; delay D [jitter=J]; cut N; reset; ` +
	`latency D [jitter=J]; bandwidth RATE; slow-close D; timeout D; slicer N [delay=D]; limit-data N; reset-peer [D]; ` +
	`options: p=F name=NAME method=M path=/P header=NAME[:VALUE] dir=down|up|both`

// FaultKind names a runtime fault.
type FaultKind string

// The runtime fault kinds.
const (
	FaultStatus    FaultKind = "status"     // HTTP: answer a status of choice
	FaultDelay     FaultKind = "delay"      // HTTP: wait before forwarding
	FaultCut       FaultKind = "cut"        // HTTP: cut the response mid-body
	FaultReset     FaultKind = "reset"      // HTTP: reset the connection
	FaultLatency   FaultKind = "latency"    // TCP: delay data
	FaultBandwidth FaultKind = "bandwidth"  // TCP: limit bytes a second
	FaultSlowClose FaultKind = "slow-close" // TCP: delay the close
	FaultTimeout   FaultKind = "timeout"    // TCP: hold data, close later or never
	FaultSlicer    FaultKind = "slicer"     // TCP: small writes
	FaultLimitData FaultKind = "limit-data" // TCP: close after N bytes
	FaultResetPeer FaultKind = "reset-peer" // TCP: reset after a while
)

// TCP reports whether k is a fault of the TCP proxy (any protocol), as
// opposed to one of the HTTP proxy.
func (k FaultKind) TCP() bool {
	switch k {
	case FaultStatus, FaultDelay, FaultCut, FaultReset:
		return false
	}
	return true
}

// IsRuntimeFault reports whether a clause's first word names a runtime
// fault kind. "latency" is both a timeline clause of the HTTP proxy
// (latency D) and a TCP fault; the caller knows which proxy it is.
func IsRuntimeFault(word string) bool {
	switch FaultKind(strings.ToLower(word)) {
	case FaultStatus, FaultDelay, FaultCut, FaultReset, FaultLatency, FaultBandwidth,
		FaultSlowClose, FaultTimeout, FaultSlicer, FaultLimitData, FaultResetPeer:
		return true
	}
	return false
}

// Direction is the way data flows through a TCP fault.
type Direction uint8

// Directions: DirDown is upstream to client (the answers), DirUp client to
// upstream (the requests).
const (
	DirDown Direction = 1
	DirUp   Direction = 2
	DirBoth           = DirDown | DirUp
	dirNone Direction = 0
)

// String names the direction as the dir= option does: down, up or both.
func (d Direction) String() string {
	switch d {
	case DirUp:
		return "up"
	case DirBoth:
		return "both"
	}
	return "down"
}

// Fault is one parsed runtime fault clause.
type Fault struct {
	Name     string    // unique within a proxy; "" lets the proxy name it after Kind
	Kind     FaultKind // what it does
	Toxicity float64   // probability it applies to an attempt or a connection, [0, 1]

	// HTTP match: every one given must hold.
	Method      string // exact method, upper case; "" any
	PathPrefix  string // the path starts with it; "" any
	Header      string // canonical header name that must be present; "" none
	HeaderValue string // with HeaderSet, the value it must have
	HeaderSet   bool   // header=NAME:VALUE was given (VALUE may be empty)

	Status         int           // status: the code, 400-599
	RetryAfter     time.Duration // status: Retry-After, whole seconds (rounded up); 0 none
	RetryAfterDate bool          // status: send Retry-After as an HTTP date RetryAfter ahead
	Body           string        // status: the body; "" a short default
	Delay          time.Duration // delay, latency: base; slow-close, timeout, reset-peer: the wait; slicer: between slices
	Jitter         time.Duration // delay, latency: ± uniformly
	Bytes          int64         // cut, limit-data: bytes let through; slicer: slice size; bandwidth: bytes a second
	Dir            Direction     // TCP: the direction(s) it acts on
}

// MaxFaultBody bounds a status fault's body; MaxFaultName a fault's name.
const (
	MaxFaultBody = 64 << 10
	MaxFaultName = 64
	maxFaultLen  = MaxFaultBody + 4096
	maxFaultSize = 1 << 40
	// maxRuntimeFaultTime bounds every duration of a runtime fault.
	maxRuntimeFaultTime = 24 * time.Hour
)

// ParseFault parses one runtime fault clause. Errors name the option and
// the rule it broke.
//
// A clause is a kind, its positional arguments, then NAME=VALUE options;
// each part is read by its own step below.
func ParseFault(clause string) (Fault, error) {
	f, args, opts, err := splitFault(clause)
	if err != nil {
		return Fault{}, err
	}
	if err := f.parseArgs(args); err != nil {
		return Fault{}, err
	}
	if err := f.parseOptions(opts); err != nil {
		return Fault{}, err
	}
	if f.Kind.TCP() && f.Dir == dirNone {
		f.Dir = DirDown
	}
	return f, nil
}

// splitFault checks the clause's size and kind and splits the words after
// the kind into positional arguments and the NAME=VALUE options that follow.
func splitFault(clause string) (f Fault, args, opts []string, err error) {
	if len(clause) > maxFaultLen {
		return Fault{}, nil, nil, fmt.Errorf("fault: %d bytes, over the limit of %d", len(clause), maxFaultLen)
	}
	words, err := faultWords(clause)
	if err != nil {
		return Fault{}, nil, nil, err
	}
	if len(words) == 0 {
		return Fault{}, nil, nil, errors.New("fault: empty; want one of: " + RuntimeFaultGrammar)
	}
	if !IsRuntimeFault(words[0]) {
		return Fault{}, nil, nil, fmt.Errorf("unknown fault %q; want one of: %s", words[0], RuntimeFaultGrammar)
	}
	f = Fault{Kind: FaultKind(strings.ToLower(words[0])), Toxicity: 1, Dir: dirNone}
	opts = words[1:]
	for len(opts) > 0 && !strings.Contains(opts[0], "=") {
		args, opts = append(args, opts[0]), opts[1:]
	}
	return f, args, opts, nil
}

// parseArgs reads the kind's positional arguments.
func (f *Fault) parseArgs(args []string) error {
	switch f.Kind {
	case FaultStatus:
		return f.parseStatusArg(args)
	case FaultDelay, FaultLatency, FaultSlowClose, FaultTimeout:
		return f.parseDelayArg(args)
	case FaultCut, FaultLimitData, FaultSlicer, FaultBandwidth:
		return f.parseBytesArg(args)
	case FaultReset:
		return f.wantArgs(args, 0, "reset")
	case FaultResetPeer:
		return f.parseResetPeerArgs(args)
	}
	return nil
}

// wantArgs checks that exactly n positional arguments were given; form is
// the clause's shape, shown when they were not.
func (f *Fault) wantArgs(args []string, n int, form string) error {
	if len(args) != n {
		return fmt.Errorf("%s: want %q", f.Kind, form)
	}
	return nil
}

// duration reads the duration v of the part named what; positive rules
// out 0.
func (f *Fault) duration(what, v string, positive bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s %s %q: want a duration with a unit, such as 700ms or 2s", f.Kind, what, v)
	case d < 0, positive && d == 0, d > maxRuntimeFaultTime:
		rule := ">= 0"
		if positive {
			rule = "> 0"
		}
		return 0, fmt.Errorf("%s %s %v: must be %s and <= %v", f.Kind, what, d, rule, maxRuntimeFaultTime)
	}
	return d, nil
}

// parseStatusArg reads "status CODE".
func (f *Fault) parseStatusArg(args []string) error {
	if err := f.wantArgs(args, 1, "status CODE"); err != nil {
		return err
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 400 || n > 599 {
		return fmt.Errorf("status: code %q: want a whole number from 400 to 599, such as 429 or 503", args[0])
	}
	f.Status = n
	return nil
}

// parseDelayArg reads the one duration of delay, latency, slow-close and
// timeout; slow-close alone needs it above 0.
func (f *Fault) parseDelayArg(args []string) (err error) {
	if err := f.wantArgs(args, 1, string(f.Kind)+" D"); err != nil {
		return err
	}
	f.Delay, err = f.duration("D", args[0], f.Kind == FaultSlowClose)
	return err
}

// bytesArgForms is the clause shape of each kind that takes a byte count.
var bytesArgForms = map[FaultKind]string{FaultCut: "cut N", FaultLimitData: "limit-data N", FaultSlicer: "slicer N", FaultBandwidth: "bandwidth RATE"}

// parseBytesArg reads the byte count of cut, limit-data, slicer and
// bandwidth; only cut and limit-data accept 0.
func (f *Fault) parseBytesArg(args []string) error {
	if err := f.wantArgs(args, 1, bytesArgForms[f.Kind]); err != nil {
		return err
	}
	n, err := parseBytes(args[0])
	if err != nil || (n == 0 && f.Kind != FaultCut && f.Kind != FaultLimitData) {
		return fmt.Errorf("%s: %q: want a whole number of bytes, >= 1 (0 allowed for cut and limit-data), at most 1TB, with an optional unit KB or MB (1024-based)", f.Kind, args[0])
	}
	f.Bytes = n
	return nil
}

// parseResetPeerArgs reads "reset-peer" or "reset-peer D".
func (f *Fault) parseResetPeerArgs(args []string) (err error) {
	if len(args) > 1 {
		return errors.New(`reset-peer: want "reset-peer" or "reset-peer D"`)
	}
	if len(args) == 1 {
		f.Delay, err = f.duration("D", args[0], false)
	}
	return err
}

// parseOptions reads the NAME=VALUE options: each at most once, only those
// the kind accepts, each by its entry in faultOptionParsers.
func (f *Fault) parseOptions(opts []string) error {
	seen := map[string]bool{}
	allowed := f.allowedOptions()
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		k = strings.ToLower(k)
		if seen[k] {
			return fmt.Errorf("%s: option %s given twice", f.Kind, k)
		}
		seen[k] = true
		if !allowed[k] {
			return fmt.Errorf("%s: unknown option %q; want one of %s", f.Kind, k, strings.Join(sortedKeys(allowed), ", "))
		}
		if seen["p"] && seen["toxicity"] {
			return fmt.Errorf("%s: give p or toxicity, not both", f.Kind)
		}
		if err := faultOptionParsers[k](f, k, v); err != nil {
			return err
		}
	}
	return nil
}

// allowedOptions is the set of options the fault's kind accepts: every
// kind the shared ones, TCP kinds a direction, HTTP kinds the request
// matchers, and a few kinds their own.
func (f *Fault) allowedOptions() map[string]bool {
	allowed := map[string]bool{"p": true, "toxicity": true, "name": true}
	if f.Kind.TCP() {
		allowed["dir"] = true
	} else {
		allowed["method"], allowed["path"], allowed["header"] = true, true, true
	}
	switch f.Kind {
	case FaultStatus:
		allowed["retry-after"], allowed["body"] = true, true
	case FaultDelay, FaultLatency:
		allowed["jitter"] = true
	case FaultSlicer:
		allowed["delay"] = true
	}
	return allowed
}

// sortedKeys lists a set's members in order, for error messages.
func sortedKeys(set map[string]bool) []string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// faultOptionParsers reads each option's value into the fault; k is the
// option's name as given, lower-cased.
var faultOptionParsers = map[string]func(f *Fault, k, v string) error{
	"p":           (*Fault).parseToxicity,
	"toxicity":    (*Fault).parseToxicity,
	"name":        (*Fault).parseName,
	"dir":         (*Fault).parseDir,
	"method":      (*Fault).parseMethod,
	"path":        (*Fault).parsePath,
	"header":      (*Fault).parseHeader,
	"retry-after": (*Fault).parseRetryAfter,
	"body":        (*Fault).parseBody,
	"jitter":      (*Fault).parseJitter,
	"delay":       (*Fault).parseDelayOption,
}

func (f *Fault) parseToxicity(k, v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || x < 0 || x > 1 {
		return fmt.Errorf("%s %s=%q: want a probability from 0 to 1, such as 0.25", f.Kind, k, v)
	}
	f.Toxicity = x
	return nil
}

func (f *Fault) parseName(_, v string) error {
	if !validFaultName(v) {
		return fmt.Errorf("%s name=%q: want 1 to %d letters, digits, '-', '_' or '.'", f.Kind, v, MaxFaultName)
	}
	f.Name = v
	return nil
}

func (f *Fault) parseDir(_, v string) error {
	switch strings.ToLower(v) {
	case "down", "downstream":
		f.Dir = DirDown
	case "up", "upstream":
		f.Dir = DirUp
	case "both":
		f.Dir = DirBoth
	default:
		return fmt.Errorf("%s dir=%q: want down, up or both", f.Kind, v)
	}
	return nil
}

func (f *Fault) parseMethod(_, v string) error {
	if !isToken(v) {
		return fmt.Errorf("%s method=%q: want a method such as GET or POST", f.Kind, v)
	}
	f.Method = strings.ToUpper(v)
	return nil
}

func (f *Fault) parsePath(_, v string) error {
	if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, " \t\r\n?#") {
		return fmt.Errorf("%s path=%q: want a path prefix starting with /, without a query", f.Kind, v)
	}
	f.PathPrefix = v
	return nil
}

func (f *Fault) parseHeader(_, v string) error {
	name, val, set := strings.Cut(v, ":")
	if !isToken(name) || strings.ContainsAny(val, "\r\n\x00") {
		return fmt.Errorf("%s header=%q: want NAME or NAME:VALUE, such as X-Canary:1", f.Kind, v)
	}
	f.Header, f.HeaderValue, f.HeaderSet = http.CanonicalHeaderKey(name), strings.TrimSpace(val), set
	return nil
}

func (f *Fault) parseRetryAfter(_, v string) (err error) {
	d, isDate := strings.CutPrefix(v, "date:")
	if f.RetryAfter, err = f.duration("retry-after", d, true); err != nil {
		return err
	}
	f.RetryAfterDate = isDate
	return nil
}

func (f *Fault) parseBody(_, v string) error {
	if len(v) > MaxFaultBody {
		return fmt.Errorf("status body: %d bytes, over the limit of %d", len(v), MaxFaultBody)
	}
	f.Body = v
	return nil
}

func (f *Fault) parseJitter(_, v string) (err error) {
	f.Jitter, err = f.duration("jitter", v, false)
	return err
}

func (f *Fault) parseDelayOption(_, v string) (err error) {
	f.Delay, err = f.duration("delay", v, false)
	return err
}

// Applies reports whether the fault applies, given u uniform in [0, 1).
func (f *Fault) Applies(u float64) bool { return u < f.Toxicity }

// Matches reports whether an HTTP request with this method, path and
// header getter falls under the fault.
func (f *Fault) Matches(method, path string, header func(string) (string, bool)) bool {
	if f.Method != "" && f.Method != method {
		return false
	}
	if f.PathPrefix != "" && !strings.HasPrefix(path, f.PathPrefix) {
		return false
	}
	if f.Header != "" {
		v, ok := header(f.Header)
		if !ok || (f.HeaderSet && v != f.HeaderValue) {
			return false
		}
	}
	return true
}

// Wait returns Delay with its jitter applied, given u uniform in [0, 1):
// uniformly in [Delay-Jitter, Delay+Jitter], never below 0.
func (f *Fault) Wait(u float64) time.Duration {
	if f.Jitter == 0 {
		return f.Delay
	}
	return max(0, f.Delay-f.Jitter+time.Duration(u*float64(2*f.Jitter)))
}

// RetryAfterValue is the Retry-After header for an answer at now: whole
// seconds (rounded up), or an HTTP date; "" for none.
func (f *Fault) RetryAfterValue(now time.Time) string {
	switch {
	case f.RetryAfter <= 0:
		return ""
	case f.RetryAfterDate:
		return now.Add(f.RetryAfter).UTC().Format(http.TimeFormat)
	}
	return strconv.FormatInt(int64((f.RetryAfter+time.Second-1)/time.Second), 10)
}

// String is the clause in its normal form; ParseFault reads it back to the
// same Fault.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	switch f.Kind {
	case FaultStatus:
		b.WriteString(" " + strconv.Itoa(f.Status))
	case FaultDelay, FaultLatency, FaultSlowClose, FaultTimeout, FaultResetPeer:
		b.WriteString(" " + f.Delay.String())
	case FaultCut, FaultLimitData, FaultSlicer, FaultBandwidth:
		b.WriteString(" " + strconv.FormatInt(f.Bytes, 10))
	}
	opt := func(k, v string) { b.WriteString(" " + k + "=" + quoteFaultValue(v)) }
	if f.RetryAfter > 0 {
		v := f.RetryAfter.String()
		if f.RetryAfterDate {
			v = "date:" + v
		}
		opt("retry-after", v)
	}
	if f.Body != "" {
		opt("body", f.Body)
	}
	if f.Jitter > 0 {
		opt("jitter", f.Jitter.String())
	}
	if f.Kind == FaultSlicer && f.Delay > 0 {
		opt("delay", f.Delay.String())
	}
	if f.Toxicity != 1 {
		opt("p", strconv.FormatFloat(f.Toxicity, 'g', -1, 64))
	}
	if f.Method != "" {
		opt("method", f.Method)
	}
	if f.PathPrefix != "" {
		opt("path", f.PathPrefix)
	}
	if f.Header != "" {
		v := f.Header
		if f.HeaderSet {
			v += ":" + f.HeaderValue
		}
		opt("header", v)
	}
	if f.Kind.TCP() && f.Dir != DirDown {
		opt("dir", f.Dir.String())
	}
	if f.Name != "" {
		opt("name", f.Name)
	}
	return b.String()
}

func quoteFaultValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\r\n\";\\") || !utf8.ValidString(v) {
		return strconv.Quote(v)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// faultWords splits a clause on blanks; a value may be double-quoted
// (key="a b") with Go escapes.
func faultWords(s string) ([]string, error) {
	var words []string
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			return words, nil
		}
		i := strings.IndexAny(s, " \t\r\n\"")
		if i < 0 {
			return append(words, s), nil
		}
		if s[i] != '"' {
			words, s = append(words, s[:i]), s[i:]
			continue
		}
		// A quoted value: find its closing quote.
		j := i + 1
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' {
				j++
			}
		}
		if j >= len(s) {
			return nil, fmt.Errorf("fault: the quote at byte %d is not closed", i)
		}
		v, err := strconv.Unquote(s[i : j+1])
		if err != nil {
			return nil, fmt.Errorf("fault: %s: not a Go-quoted string: %v", s[i:j+1], err)
		}
		if j+1 < len(s) && !strings.ContainsRune(" \t\r\n", rune(s[j+1])) {
			return nil, fmt.Errorf("fault: text right after the quoted value %s", s[i:j+1])
		}
		words, s = append(words, s[:i]+v), s[j+1:]
	}
}

// parseBytes reads 1024, 64KB or 2MB (1024-based units).
func parseBytes(v string) (int64, error) {
	mult := int64(1)
	u := strings.ToUpper(v)
	switch {
	case strings.HasSuffix(u, "KB"):
		mult, u = 1<<10, u[:len(u)-2]
	case strings.HasSuffix(u, "MB"):
		mult, u = 1<<20, u[:len(u)-2]
	case strings.HasSuffix(u, "B"):
		u = u[:len(u)-1]
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > maxFaultSize/mult {
		return 0, errors.New("bad size")
	}
	return n * mult, nil
}

func validFaultName(s string) bool {
	if s == "" || len(s) > MaxFaultName {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ValidFaultName reports whether s may name a fault or a proxy: 1 to 64
// letters, digits, '-', '_' or '.'.
func ValidFaultName(s string) bool { return validFaultName(s) }

func isToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
