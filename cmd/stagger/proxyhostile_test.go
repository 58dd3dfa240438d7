package main

import (
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestProxyHostileHeaders sends the worst value of every header the proxy
// reads (the attempt number, the grouping key), each alone and repeated,
// over a real connection: the proxy keeps serving and counts no attempt
// number or request key beyond the rule (docs/architecture.md, "Values from
// the wire").
func TestProxyHostileHeaders(t *testing.T) {
	up := newUpstream(t, nil)
	_, base := startProxy(t, up)
	addr := strings.TrimPrefix(base, "http://")
	cases := wiretest.Cases(retryhttp.AttemptHeader, labkit.HeaderRequestID)
	for _, h := range cases {
		_, _ = wiretest.Send(addr, "/x", h) // refused (400, 431) or served: either way, no crash
	}
	before := getStats(t, base)
	for _, id := range []string{"\xff\xfe\xfd", strings.Repeat("x", 256), "caf\u00e9"} {
		if code, err := wiretest.Send(addr, "/x", []wiretest.Header{{labkit.HeaderRequestID, id}}); err != nil || code != 200 {
			t.Fatalf("ID %.20q: %d, %v", id, code, err)
		}
	}
	s := getStats(t, base)
	if s.Unidentified-before.Unidentified != 3 || deref(s.Requests) != deref(before.Requests) {
		t.Errorf("malformed IDs: unidentified %d → %d, requests %d → %d; want +3 unidentified, no new request",
			before.Unidentified, s.Unidentified, deref(before.Requests), deref(s.Requests))
	}
	if code, err := wiretest.Send(addr, "/x", []wiretest.Header{{labkit.HeaderRequestID, "r1"}, {retryhttp.AttemptHeader, "2"}}); err != nil || code != 200 {
		t.Fatalf("a normal request after the hostile ones: %d, %v", code, err)
	}
	s = getStats(t, base)
	for k := range s.ByAttempt {
		if k != "none" && k != "1" && k != "2" {
			t.Errorf("attempt number %q counted from a hostile value (by_attempt %v)", k, s.ByAttempt)
		}
	}
	if s.Total < len(cases)/2 || int64(s.Total) != up.calls.Load() {
		t.Errorf("%d attempts counted, %d reached the upstream, %d cases sent", s.Total, up.calls.Load(), len(cases))
	}
}
