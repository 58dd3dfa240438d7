package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestProxyChunkedBodyLimit: a chunked body over --max-body (its length
// unknown until it ends) was streamed to the upstream until the limit
// cut it, then answered 502 and counted as failed. Nothing of it may
// reach the upstream: the proxy reads a body of unknown length (up to the
// limit) before forwarding, answers 413 and counts it as too large,
// not as an upstream failure.
func TestProxyChunkedBodyLimit(t *testing.T) {
	var got atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
	})
	_, base := startProxyFlags(t, up, "--max-body", "1024")
	post := func(body string) int {
		// A MultiReader has no known length: the client sends it chunked.
		resp, err := http.Post(base+"/up", "text/plain", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(strings.Repeat("x", 64<<10)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized chunked body: %d, want 413", code)
	}
	if up.calls.Load() != 0 || got.Load() != 0 {
		t.Errorf("the upstream saw %d calls, %d bytes of an oversized body; want none", up.calls.Load(), got.Load())
	}
	// Declared too large: 413 at once, nothing read.
	resp, err := http.Post(base+"/up", "text/plain", bytes.NewReader(make([]byte, 2048)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || up.calls.Load() != 0 {
		t.Errorf("declared oversized body: %d, upstream %d calls", resp.StatusCode, up.calls.Load())
	}
	// At the limit: forwarded whole.
	if code := post(strings.Repeat("y", 1024)); code != http.StatusOK || got.Load() != 1024 {
		t.Errorf("a chunked body at the limit: %d, upstream got %d bytes; want 200 and 1024", code, got.Load())
	}
	s := getStats(t, base)
	if s.Failed != 0 || s.TooLarge != 2 || s.Accepted != 1 {
		t.Errorf("stats: failed %d, too_large %d, accepted %d; want 0, 2, 1", s.Failed, s.TooLarge, s.Accepted)
	}
}
