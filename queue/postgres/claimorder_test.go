package postgres

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// TestClaimOrder: claimed jobs come back ordered by their available_at
// before the claim, then ID, with each job's previous time moved with it,
// whatever order the rows came in.
func TestClaimOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 17, 1000} {
		c := claimOrder{}
		for i := range n {
			p := int64(r.IntN(5))
			c.jobs = append(c.jobs, queue.Job{ID: fmt.Sprintf("j%03d-%04d", r.IntN(1000), i), CreatedAt: p})
			c.prev = append(c.prev, p)
		}
		sort.Sort(c)
		for i := range c.jobs {
			if c.jobs[i].CreatedAt != c.prev[i] {
				t.Fatalf("n=%d: job %d moved without its time", n, i)
			}
			if i > 0 && (c.prev[i-1] > c.prev[i] || c.prev[i-1] == c.prev[i] && c.jobs[i-1].ID >= c.jobs[i].ID) {
				t.Fatalf("n=%d: out of order at %d: (%d, %s) before (%d, %s)", n, i, c.prev[i-1], c.jobs[i-1].ID, c.prev[i], c.jobs[i].ID)
			}
		}
	}
}
