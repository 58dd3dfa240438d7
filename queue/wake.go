package queue

import (
	"reflect"
	"slices"
	"sync"
	"time"
)

// An enqueue wakes the idle loops of every Worker in this process that
// runs the job's named queue on the same store, whichever Queue value
// each was given: a web handler and a worker commonly build their own.
// Loops in other processes find the job at their next poll, or at once
// on a store with notifications (Notifier).

// wakeKey names one store's named queue. A store that cannot be compared
// (a struct value holding a func or a slice, or an interface holding
// one) has no key: an enqueue through a Queue on it wakes that Queue's
// own Workers only.
type wakeKey struct {
	store any
	queue string
}

// keyOf is the key of q's store and the named queue; false: none.
func (q *Queue) keyOf(name string) (wakeKey, bool) {
	return wakeKey{store: q.store, queue: name}, q.keyed
}

// keyed reports whether s can be a wakeKey's store.
func keyed(s Store) bool { return reflect.ValueOf(s).Comparable() }

// listening holds the Queues that Workers run now, by key, each with the
// number of Workers running it. Entries leave when their Workers stop,
// so it holds no more than the running Workers' queues.
var listening struct {
	mu sync.Mutex
	m  map[wakeKey]map[*Queue]int
}

// listen counts q among the Queues an enqueue wakes, until stop.
func (q *Queue) listen() (stop func()) {
	k, ok := q.keyOf(q.cfg.Queue)
	if !ok {
		return func() {}
	}
	listening.mu.Lock()
	defer listening.mu.Unlock()
	if listening.m == nil {
		listening.m = map[wakeKey]map[*Queue]int{}
	}
	qs := listening.m[k]
	if qs == nil {
		qs = map[*Queue]int{}
		listening.m[k] = qs
	}
	qs[q]++
	return func() {
		listening.mu.Lock()
		defer listening.mu.Unlock()
		if qs[q]--; qs[q] == 0 {
			delete(qs, q)
		}
		if len(qs) == 0 {
			delete(listening.m, k)
		}
	}
}

// wakeQueue wakes q's own idle loops and those of every running Queue of
// q's store and the named queue.
func (q *Queue) wakeQueue(name string) { q.each(name, (*Queue).signal) }

// each calls f on every running Queue of q's store and the named queue;
// on a store that has no key, on q alone if it is of that queue.
func (q *Queue) each(name string, f func(*Queue)) {
	k, ok := q.keyOf(name)
	if !ok {
		if name == q.cfg.Queue {
			f(q)
		}
		return
	}
	listening.mu.Lock()
	defer listening.mu.Unlock()
	for o := range listening.m[k] {
		f(o)
	}
}

// wakeRows wakes the loops of the named queues an enqueue created jobs
// in: those with a job due at its creation at once; the others learn when
// their delayed jobs are due.
func (q *Queue) wakeRows(res []Inserted) {
	type batch struct {
		name string
		due  bool    // a job is due now
		soon []int64 // the later AvailableAts
	}
	var bs []batch // few: most batches go to one queue
	for i := range res {
		if !res[i].Created {
			continue
		}
		j := &res[i].Job
		i := slices.IndexFunc(bs, func(b batch) bool { return b.name == j.Queue })
		if i < 0 {
			i = len(bs)
			bs = append(bs, batch{name: j.Queue})
		}
		if j.AvailableAt <= j.CreatedAt {
			bs[i].due = true
		} else {
			bs[i].soon = append(bs[i].soon, j.AvailableAt)
		}
	}
	for _, b := range bs {
		if len(b.soon) > 0 {
			q.noteDue(b.name, b.soon, !b.due)
		}
		if b.due {
			q.wakeQueue(b.name)
		}
	}
}

// maxDues bounds the due times a Queue keeps: a job due later than the
// last of them is found by a poll.
const maxDues = 64

// A loop with nothing due sleeps until the sooner of its jittered poll and
// the first due time its Queue knows of: a retry or snooze this process
// recorded, or a delayed job it enqueued. So a retry waits what the
// Policy's schedule says, not until the next poll.

// noteDue adds the due times ats (Unix ms) to those of the running Queues
// of q's store and the named queue, q included; with wake, a Queue whose
// soonest due time moved earlier wakes its idle loops, to sleep again
// until then.
func (q *Queue) noteDue(name string, ats []int64, wake bool) {
	q.each(name, func(o *Queue) { o.addDues(ats, wake) })
}

func (q *Queue) addDues(ats []int64, wake bool) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	sooner := false
	for _, at := range ats {
		i, found := slices.BinarySearch(q.dues, at)
		if found || i == maxDues {
			continue
		}
		if len(q.dues) == maxDues {
			q.dues = q.dues[:maxDues-1]
		}
		q.dues = slices.Insert(q.dues, i, at)
		sooner = sooner || i == 0
	}
	if sooner && wake {
		q.signalLocked()
	}
}

// untilDue is how long a loop whose claim at t0 (Unix ms) found nothing
// may sleep before the first due time after t0, and that time; false:
// none is known. Due times at or before t0 are forgotten: that claim could
// take their jobs.
func (q *Queue) untilDue(t0 int64) (time.Duration, int64, bool) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	i, _ := slices.BinarySearch(q.dues, t0+1)
	q.dues = q.dues[:copy(q.dues, q.dues[i:])]
	if len(q.dues) == 0 {
		return 0, 0, false
	}
	at := q.dues[0]
	return time.Duration(max(at-q.now(), 0)) * time.Millisecond, at, true
}

// dropDue forgets the due time at.
func (q *Queue) dropDue(at int64) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if i, found := slices.BinarySearch(q.dues, at); found {
		q.dues = slices.Delete(q.dues, i, i+1)
	}
}
