package retryhttp

import (
	"context"
	"errors"
	"net/http/httptrace"
	"runtime"
	"testing"
	"testing/synctest"
)

// TestWireCtxCancelsItself: an attempt context over a parent that is never
// done carries the trace, and its own cancel reaches what derives from it
// (net/http derives a cancelable context from every request's) without a
// goroutine watching it.
func TestWireCtxCancelsItself(t *testing.T) {
	if traceKey == nil {
		t.Fatal("httptrace's context key was not found")
	}
	synctest.Test(t, func(t *testing.T) {
		trace := &httptrace.ClientTrace{}
		type key struct{}
		w := &wireCtx{Context: context.WithValue(context.Background(), key{}, "v"), trace: trace, own: true}
		if got := httptrace.ContextClientTrace(w); got != trace {
			t.Fatalf("ContextClientTrace = %p, want the attempt's %p", got, trace)
		}
		if w.Value(key{}) != "v" {
			t.Error("the parent's values are lost")
		}
		n := runtime.NumGoroutine()
		child, stop := context.WithCancelCause(w)
		defer stop(nil)
		if runtime.NumGoroutine() != n {
			t.Error("deriving a context started a goroutine to watch the attempt's")
		}
		stopped, stopStopped := context.WithCancel(w)
		defer stopStopped()
		after := context.AfterFunc(stopped, func() { t.Error("a stopped AfterFunc ran") })
		if !after() {
			t.Error("AfterFunc's stop reported it had not stopped anything")
		}
		if w.Err() != nil || child.Err() != nil {
			t.Fatal("done before the cancel")
		}
		w.cancel()
		w.cancel() // idempotent
		synctest.Wait()
		if !errors.Is(w.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("after the cancel: Err %v, the child's %v; want both context.Canceled", w.Err(), child.Err())
		}
		select {
		case <-w.Done():
		default:
			t.Error("Done is open after the cancel")
		}
		late, stopLate := context.WithCancel(w) // derived after the cancel: done at once
		defer stopLate()
		synctest.Wait()
		if late.Err() == nil {
			t.Error("a context derived after the cancel is not done")
		}
	})
}

// TestWireCtxOfAParentThatEnds: without own, Done, Err and AfterFunc are
// the parent's.
func TestWireCtxOfAParentThatEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		w := &wireCtx{Context: parent, trace: &httptrace.ClientTrace{}}
		child, stop := context.WithCancel(w)
		defer stop()
		cancel()
		synctest.Wait()
		if w.Done() != parent.Done() || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("child.Err() = %v after the parent's cancel, want context.Canceled", child.Err())
		}
	})
}
