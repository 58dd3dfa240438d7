package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/retryhttp"
)

// grouping says which attempts the proxy counts as one logical request:
// those with the same value of a header, or (header "") those with the same
// method, request target and client IP.
type grouping struct {
	header string // canonical; "" for method+path+client
}

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

// grouping returns g as the proxy's Grouping.
func (g grouping) proxy() faultproxy.Grouping { return faultproxy.Grouping{Header: g.header} }

// String describes the grouping for the report and the stats.
func (g grouping) String() string { return g.proxy().String() }
