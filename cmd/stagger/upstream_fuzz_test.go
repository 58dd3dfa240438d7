package main

import "testing"

// FuzzParseUpstream: any --upstream value is an HTTP or TCP upstream or a
// refusal with a message, never a panic.
func FuzzParseUpstream(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8080", "tcp://127.0.0.1:5432", "127.0.0.1:6379", "ftp://x", "", "http://", "http://u:p@h:1/x?y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, _, err := parseUpstream(s)
		if err == nil && u == nil {
			t.Fatalf("%q: accepted with no URL", s)
		}
		if err != nil && err.Error() == "" {
			t.Fatalf("%q: an error with no text", s)
		}
	})
}
