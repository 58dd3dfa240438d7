package retrydriver_test

import (
	"sync"
	"testing"

	"github.com/staggerhq/stagger/retry/retrydriver"
)

// TestNewID: 16 lowercase hex digits, none handed out twice, also by
// goroutines taking them at once (run with -race).
func TestNewID(t *testing.T) {
	const workers, each = 4, 5000
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ids[w] = append(ids[w], retrydriver.NewID())
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, workers*each)
	nibbles := [16]int{}
	for _, l := range ids {
		for _, id := range l {
			if len(id) != 16 {
				t.Fatalf("ID %q: %d characters, want 16", id, len(id))
			}
			for _, c := range []byte(id) {
				switch {
				case c >= '0' && c <= '9':
					nibbles[c-'0']++
				case c >= 'a' && c <= 'f':
					nibbles[c-'a'+10]++
				default:
					t.Fatalf("ID %q: %q is not a lowercase hex digit", id, c)
				}
			}
			if seen[id] {
				t.Fatalf("ID %q handed out twice", id)
			}
			seen[id] = true
		}
	}
	// 320,000 digits: each of the 16 about 20,000 times (±5 % is > 10σ).
	for d, n := range nibbles {
		if n < 19000 || n > 21000 {
			t.Errorf("digit %x: %d times in %d IDs, want about 20,000", d, n, workers*each)
		}
	}
}

func TestNewIDAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(16*100, func() { retrydriver.NewID() }); n != 0 {
		t.Errorf("NewID: %v allocations a call, want 0 (2 per block of 16)", n)
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		retrydriver.NewID()
	}
}
