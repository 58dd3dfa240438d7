package main

import (
	"fmt"
	"hash/maphash"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retryhttp"
)

// grouping says which attempts the proxy counts as one logical request:
// those with the same value of a header, or (header "") those with the same
// method, request target and client IP.
type grouping struct {
	header string // canonical; "" for method+path+client
}

// groupSeed hashes request targets too long to be part of a key.
var groupSeed = maphash.MakeSeed()

// parseGrouping reads a --group-by value.
func parseGrouping(v string) (grouping, error) {
	switch {
	case v == "idempotency-key":
		return grouping{header: retryhttp.IdempotencyKeyHeader}, nil
	case v == "method+path+client":
		return grouping{}, nil
	case strings.HasPrefix(v, "header:"):
		name := strings.TrimPrefix(v, "header:")
		if !validHeaderName(name) {
			return grouping{}, fmt.Errorf("--group-by %q: want header:NAME with a header name, such as header:%s", v, labkit.HeaderRequestID)
		}
		return grouping{header: http.CanonicalHeaderKey(name)}, nil
	}
	return grouping{}, fmt.Errorf("--group-by %q: want idempotency-key, header:NAME or method+path+client", v)
}

// validHeaderName reports whether name is an HTTP field name (a token).
func validHeaderName(name string) bool {
	if name == "" || len(name) > 256 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// key returns the logical request r belongs to, "" when it carries none.
func (g grouping) key(r *http.Request) string {
	if g.header != "" {
		// The rule for IDs from the wire: one value of 1 to 255 bytes of
		// printable ASCII; anything else leaves the attempt ungrouped.
		if v := r.Header[g.header]; len(v) == 1 && wire.ValidID(v[0]) {
			return v[0]
		}
		return ""
	}
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	k := r.Method + " " + client + " " + target
	if len(k) > labkit.MaxIDLen {
		k = r.Method + " " + client + " #" + strconv.FormatUint(maphash.String(groupSeed, target), 16)
	}
	return k
}

// String describes the grouping for the report and the stats.
func (g grouping) String() string {
	if g.header == "" {
		return "method+path+client"
	}
	return "header " + g.header
}
