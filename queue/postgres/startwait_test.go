package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// forward serves addr by copying every connection to and from to, until
// the test ends.
func forward(t *testing.T, addr, to string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
}

// TestOpenWaitsForServer: with StartWait, Open rides out a server that is
// down at start and opens the store once it is up; each wait is reported
// (without the password) before it begins.
func TestOpenWaitsForServer(t *testing.T) {
	sharedPool(t) // skips when no server
	url := os.Getenv("STAGGER_POSTGRES_URL")
	if url == "" {
		url = defaultURL
	}
	cfg, err := pgxParse(url)
	if err != nil {
		t.Fatal(err)
	}
	addr := closedPort(t)
	dsn := "postgres://" + cfg.user + ":s3cr3tpw@" + addr + "/" + cfg.db + "?connect_timeout=5"
	var waits []time.Duration
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{
		Schema:    tempSchema(t),
		StartWait: time.Minute,
		OnStartRetry: func(err error, wait time.Duration) {
			if strings.Contains(err.Error(), "s3cr3tpw") {
				t.Errorf("the retry's error shows the password: %v", err)
			}
			waits = append(waits, wait)
			if len(waits) == 2 { // the server comes up
				forward(t, addr, cfg.host)
			}
		},
	})
	if err != nil {
		t.Fatalf("Open after the server came up: %v", err)
	}
	defer s.Close()
	if len(waits) != 2 {
		t.Fatalf("waited %d times, want 2 (down twice, then up)", len(waits))
	}
	for _, w := range waits {
		if w <= 0 || w > 5*time.Second {
			t.Fatalf("waits %v, want each in (0, 5s]", waits)
		}
	}
	if _, _, err := newQueue(t, s).Enqueue(context.Background(), queue.NewJob{ID: "after-wait"}); err != nil {
		t.Fatal(err)
	}
}

// TestOpenStartWaitBounded: a server that stays down fails Open once
// StartWait is spent; canceling ctx ends the wait at once; without
// StartWait the first failure is returned; a failure waiting cannot cure
// (a password refused) is not retried.
func TestOpenStartWaitBounded(t *testing.T) {
	dsn := "postgres://u:s3cr3tpw@" + closedPort(t) + "/db?connect_timeout=5"
	n := 0
	_, err := postgres.Open(context.Background(), dsn, postgres.Options{
		StartWait: 300 * time.Millisecond, OnStartRetry: func(error, time.Duration) { n++ },
	})
	if err == nil || strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("Open on a closed port = %v", err)
	}
	if n == 0 {
		t.Fatal("gave up without waiting")
	}

	ctx, cancel := context.WithCancel(context.Background())
	_, err = postgres.Open(ctx, dsn, postgres.Options{
		StartWait: time.Hour, OnStartRetry: func(error, time.Duration) { cancel() },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open canceled while waiting = %v, want context.Canceled", err)
	}

	n = 0
	if _, err = postgres.Open(context.Background(), dsn, postgres.Options{OnStartRetry: func(error, time.Duration) { n++ }}); err == nil || n != 0 {
		t.Fatalf("Open without StartWait = %v after %d waits, want a failure and none", err, n)
	}

	if _, err := postgres.Open(context.Background(), dsn, postgres.Options{StartWait: -time.Second}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "StartWait") {
		t.Fatalf("negative StartWait = %v, want an error naming StartWait", err)
	}
}

// TestOpenStartWaitPermanent: an error waiting cannot cure (the server
// refuses the login) is returned at once.
func TestOpenStartWaitPermanent(t *testing.T) {
	sharedPool(t)
	url := os.Getenv("STAGGER_POSTGRES_URL")
	if url == "" {
		url = defaultURL
	}
	cfg, err := pgxParse(url)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	dsn := "postgres://stagger_no_such_role_x:pw@" + cfg.host + "/" + cfg.db + "?connect_timeout=5"
	if _, err := postgres.Open(context.Background(), dsn, postgres.Options{StartWait: time.Minute, OnStartRetry: func(error, time.Duration) { n++ }}); err == nil || n != 0 {
		t.Fatalf("Open as a role that does not exist = %v after %d waits, want a failure and none", err, n)
	}
}

type pgTarget struct{ user, db, host string }

// pgxParse reads the role, database and host:port of a connection URL.
func pgxParse(url string) (pgTarget, error) {
	c, err := pgxpool.ParseConfig(url)
	if err != nil {
		return pgTarget{}, errors.New("the connection URL does not parse")
	}
	cc := c.ConnConfig
	return pgTarget{user: cc.User, db: cc.Database, host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))}, nil
}

func newQueue(t *testing.T, s queue.Store) *queue.Queue {
	t.Helper()
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}
