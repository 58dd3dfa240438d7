package backoff

import (
	"testing"
	"time"
)

func BenchmarkExponentialFull(b *testing.B) {
	s := Exponential{Base: 60 * time.Millisecond, Cap: 10 * time.Second, Jitter: Full, Unit: time.Millisecond}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = n%20 + 1
		s.Delay(n, 0, nil)
	}
}

func BenchmarkDecorrelated(b *testing.B) {
	s := Decorrelated{Base: 10 * time.Millisecond, Cap: 10 * time.Second}
	b.ReportAllocs()
	var prev time.Duration
	for b.Loop() {
		prev = s.Delay(1, prev, nil)
	}
}

func BenchmarkRetryDelay(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = n%70 + 1
		RetryDelay(n, 100*time.Millisecond, time.Minute, 0.37)
	}
}
