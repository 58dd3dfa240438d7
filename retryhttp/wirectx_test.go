package retryhttp

import (
	"context"
	"errors"
	"net/http/httptrace"
	"regexp"
	"runtime"
	"strings"
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
		w := &wireCtx{Context: context.WithValue(context.Background(), key{}, "v"), own: true}
		w.trace.Store(trace)
		if got := httptrace.ContextClientTrace(w); got != trace {
			t.Fatalf("ContextClientTrace = %p, want the attempt's %p", got, trace)
		}
		if w.Value(key{}) != "v" {
			t.Error("the parent's values are lost")
		}
		child, stop := context.WithCancelCause(w)
		defer stop(nil)
		if n := watchers(t); n != 0 {
			t.Errorf("%d goroutines watch the attempt's context after deriving one from it, want none", n)
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
		w := &wireCtx{Context: parent}
		w.trace.Store(&httptrace.ClientTrace{})
		child, stop := context.WithCancel(w)
		defer stop()
		cancel()
		synctest.Wait()
		if w.Done() != parent.Done() || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("child.Err() = %v after the parent's cancel, want context.Canceled", child.Err())
		}
	})
}

// TestWireCtxDetach: once detached, an attempt context and what derives
// from it carry no trace (the parent's values stay).
func TestWireCtxDetach(t *testing.T) {
	type key struct{}
	w := &wireCtx{Context: context.WithValue(context.Background(), key{}, "v"), own: true}
	w.trace.Store(&httptrace.ClientTrace{})
	child, cancel := context.WithCancel(w)
	defer cancel()
	if httptrace.ContextClientTrace(child) == nil {
		t.Fatal("a context derived from the attempt's does not carry its trace")
	}
	w.detach()
	if tr := httptrace.ContextClientTrace(w); tr != nil {
		t.Errorf("ContextClientTrace = %p after detach, want nil", tr)
	}
	if tr := httptrace.ContextClientTrace(child); tr != nil {
		t.Errorf("a derived context's ContextClientTrace = %p after detach, want nil", tr)
	}
	if w.Value(key{}) != "v" || child.Value(key{}) != "v" {
		t.Error("the parent's values are lost")
	}
}

// watchers counts the goroutines that package context started, from the
// calling goroutine, to watch a parent: what propagateCancel falls back to
// for a parent that is neither its own kind nor has AfterFunc. Goroutines
// of other tests were started from other goroutines.
func watchers(t *testing.T) int {
	t.Helper()
	own := goroutineRE.FindStringSubmatch(stacks(false))
	if own == nil {
		t.Fatal("watchers: no goroutine ID in the stack")
	}
	created := "created by context.(*cancelCtx).propagateCancel in goroutine " + own[1] + "\n"
	return strings.Count(stacks(true), created)
}

var goroutineRE = regexp.MustCompile(`^goroutine (\d+) \[`)

// stacks returns runtime.Stack's text, of every goroutine if all.
func stacks(all bool) string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestWireCtxStoppedRegistrations: AfterFunc's stop leaves the
// registration with the context, and what then runs on a cancel does
// nothing more: a derived context that ended stays as it ended, and a
// function whose context.AfterFunc was stopped does not run. Once
// detached, a context that was not canceled registers nothing more.
func TestWireCtxStoppedRegistrations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &wireCtx{Context: context.Background(), own: true}
		w.trace.Store(&httptrace.ClientTrace{})
		ended, end := context.WithCancelCause(w)
		cause := errors.New("ended on its own")
		end(cause)
		stop := context.AfterFunc(w, func() { t.Error("a stopped AfterFunc ran") })
		if !stop() {
			t.Error("context.AfterFunc's stop reported it had not stopped anything")
		}
		w.cancel()
		synctest.Wait()
		if context.Cause(ended) != cause {
			t.Errorf("the ended child's cause is %v, want its own", context.Cause(ended))
		}

		d := &wireCtx{Context: context.Background(), own: true}
		d.trace.Store(&httptrace.ClientTrace{})
		_ = d.Done()
		d.detach()
		late, stopLate := context.WithCancel(d)
		defer stopLate()
		if len(d.after) != 0 {
			t.Errorf("%d registrations after the detach, want none", len(d.after))
		}
		if late.Err() != nil {
			t.Error("a context derived after the detach is done")
		}
	})
}
