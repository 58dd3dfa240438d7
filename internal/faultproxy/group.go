package faultproxy

import (
	"hash/maphash"
	"net"
	"net/http"
	"strconv"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/wire"
)

// Grouping says which attempts an HTTP proxy counts as one logical
// request: those with the same value of Header, or (Header "") those with
// the same method, request target and client IP.
type Grouping struct {
	Header string // canonical; "" for method+path+client
}

// targetHashKey hashes request targets too long to be part of a key.
var targetHashKey = maphash.MakeSeed()

// Key returns the logical request r belongs to, "" when it carries none.
func (g Grouping) Key(r *http.Request) string {
	if g.Header != "" {
		// The rule for IDs from the wire: one value of 1 to 255 bytes of
		// printable ASCII; anything else leaves the attempt ungrouped.
		if v := r.Header[g.Header]; len(v) == 1 && wire.ValidID(v[0]) {
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
		k = r.Method + " " + client + " #" + strconv.FormatUint(maphash.String(targetHashKey, target), 16)
	}
	return k
}

// String describes the grouping for the report and the stats.
func (g Grouping) String() string {
	if g.Header == "" {
		return "method+path+client"
	}
	return "header " + g.Header
}
