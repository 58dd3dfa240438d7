package queue

import (
	"reflect"
	"slices"
	"sync"
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
func (q *Queue) wakeQueue(name string) {
	if name == q.cfg.Queue {
		q.signal()
	}
	k, ok := q.keyOf(name)
	if !ok {
		return
	}
	listening.mu.Lock()
	defer listening.mu.Unlock()
	for o := range listening.m[k] {
		if o != q {
			o.signal()
		}
	}
}

// wakeRows wakes the loops of the named queues rows went to.
func (q *Queue) wakeRows(rows []Job) {
	var names []string // few: most batches go to one queue
	for _, r := range rows {
		if !slices.Contains(names, r.Queue) {
			names = append(names, r.Queue)
			q.wakeQueue(r.Queue)
		}
	}
}
