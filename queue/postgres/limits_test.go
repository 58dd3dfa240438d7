package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/retry"
)

// The fleet under test: every worker process runs this many handlers,
// against limits well below what the fleet could start.
const (
	fleetProcs       = 4
	fleetConcurrency = 8
	fleetJobs        = 120
	fleetMaxInFlight = 5
	fleetRate        = 40 // claims per second
	fleetBurst       = 5
)

// TestFleetLimits: four Worker processes of eight handlers each (32 at
// once without limits) drain one queue on one PostgreSQL with Limits
// {MaxInFlight 5, Rate 40/s, Burst 5}. Every handler writes the time of
// its claim, its start and its end in the database; the test then counts
// the peak in flight and the most claims in any one second, which the
// store must have kept within the limits whatever the processes did.
func TestFleetLimits(t *testing.T) {
	if os.Getenv("STAGGER_FLEET_CHILD") != "" {
		t.Skip("a child of TestFleetLimits runs TestFleetLimitsChild")
	}
	s := newStore(t)
	ctx := context.Background()
	p := sharedPool(t)
	log := s.Schema() + ".fleet_log"
	if _, err := p.Exec(ctx, `CREATE TABLE `+log+` (id text, claimed bigint, started bigint, ended bigint)`); err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []queue.NewJob
	for i := range fleetJobs {
		jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("j%03d", i)})
	}
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range fleetProcs {
		cmd := exec.Command(exe, "-test.run", "^TestFleetLimitsChild$")
		cmd.Env = append(os.Environ(), "STAGGER_FLEET_CHILD=1", "STAGGER_FLEET_SCHEMA="+strings.Trim(s.Schema(), `"`))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("worker process: %v", err)
		}
	}

	rows, err := p.Query(ctx, `SELECT claimed, started, ended FROM `+log)
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		at    int64
		delta int
	}
	var events []event
	var claims []int64
	for rows.Next() {
		var cl, st, en int64
		if err := rows.Scan(&cl, &st, &en); err != nil {
			t.Fatal(err)
		}
		if cl == 0 {
			t.Fatal("a job ran without a limited claim")
		}
		events = append(events, event{st, +1}, event{en, -1})
		claims = append(claims, cl)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(claims) != fleetJobs {
		t.Fatalf("%d handler runs, want %d (each job once)", len(claims), fleetJobs)
	}
	// Peak in flight: ends before starts at the same millisecond.
	sort.Slice(events, func(i, j int) bool {
		return events[i].at < events[j].at || events[i].at == events[j].at && events[i].delta < events[j].delta
	})
	peak, cur := 0, 0
	for _, e := range events {
		cur += e.delta
		peak = max(peak, cur)
	}
	// The most claims in any window of one second, at the times the
	// claims passed to the store: the times its bucket counts. (A
	// handler's own start follows its claim by a lock wait, a commit and
	// a goroutine's start, tens of milliseconds on a loaded machine.)
	sort.Slice(claims, func(i, j int) bool { return claims[i] < claims[j] })
	most := 0
	for i, j := 0, 0; j < len(claims); j++ {
		for claims[j]-claims[i] >= 1000 {
			i++
		}
		most = max(most, j-i+1)
	}
	t.Logf("%d processes × %d handlers: peak in flight %d (limit %d), most claims in 1 s %d (rate %d/s, burst %d)",
		fleetProcs, fleetConcurrency, peak, fleetMaxInFlight, most, fleetRate, fleetBurst)
	if peak > fleetMaxInFlight {
		t.Errorf("peak in flight %d, above MaxInFlight %d", peak, fleetMaxInFlight)
	}
	// A bucket of Burst tokens refilled at Rate makes at most Burst +
	// Rate·1s claims in any one second. A process reads its clock before
	// it waits for the queue's bucket, so claims reach the bucket a few
	// milliseconds out of order: 50 ms of that slack is allowed, 2 claims
	// at this rate.
	if bound := fleetBurst + fleetRate*(1000+50)/1000; most > bound {
		t.Errorf("%d claims in one second, above Burst + Rate·1.05 s = %d", most, bound)
	}
	if peak < 2 {
		t.Errorf("peak in flight %d: the fleet never ran handlers side by side, the test proves nothing", peak)
	}
}

// TestFleetLimitsChild is one worker process of TestFleetLimits.
func TestFleetLimitsChild(t *testing.T) {
	schema := os.Getenv("STAGGER_FLEET_SCHEMA")
	if os.Getenv("STAGGER_FLEET_CHILD") == "" || schema == "" {
		t.Skip("run by TestFleetLimits")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := sharedPool(t)
	ps, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	s := &claimTimes{Store: ps, at: map[string]int64{}}
	lim := queue.Limits{MaxInFlight: fleetMaxInFlight, Rate: fleetRate, Burst: fleetBurst}
	q, err := queue.New(s, queue.Config{Limits: lim, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	log := `"` + schema + `".fleet_log`
	h := func(ctx context.Context, _ []byte) error {
		d := jobID(ctx)
		start := time.Now().UnixMilli()
		time.Sleep(15 * time.Millisecond) // the dependency's work
		_, err := p.Exec(ctx, `INSERT INTO `+log+` VALUES ($1, $2, $3, $4)`, d, s.claimedAt(d), start, time.Now().UnixMilli())
		return err
	}
	w, err := queue.NewWorker(q, h, queue.WorkerConfig{Concurrency: fleetConcurrency, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Stop once every job is done (any process may finish the last).
	go func() {
		for ctx.Err() == nil {
			st, err := q.Stats(ctx)
			if err == nil && st.Done == fleetJobs {
				cancel()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := w.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(context.Background()); err != nil || st.Done != fleetJobs {
		t.Fatalf("stats at the end %+v, %v", st, err)
	}
}

// claimTimes is a postgres.Store that remembers the time each job's last
// limited claim passed to the store.
type claimTimes struct {
	*postgres.Store
	mu sync.Mutex
	at map[string]int64
}

func (c *claimTimes) ClaimLimited(ctx context.Context, name string, lim queue.Limits, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	jobs, err := c.Store.ClaimLimited(ctx, name, lim, now, leaseUntil, limit)
	c.mu.Lock()
	for _, j := range jobs {
		c.at[j.ID] = now
	}
	c.mu.Unlock()
	return jobs, err
}

func (c *claimTimes) claimedAt(id string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[id]
}

func jobID(ctx context.Context) string {
	d, _ := retry.DeliveryFrom(ctx)
	return d.ID
}
