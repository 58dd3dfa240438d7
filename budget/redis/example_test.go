package redisbudget_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	redisbudget "github.com/staggerhq/stagger/budget/redis"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// Every replica of a service shares one token-bucket budget for the payments
// API: +1 credit per original request (cap 200), 10 per retry, kept in
// Redis. With Redis unreachable, retries stop (fail closed); originals go on.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	payments, err := redisbudget.New(redisbudget.Config{Client: rdb, Key: "budget:payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer payments.Close() // pushes pending earnings, returns unused reservations

	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{
		MaxAttempts: 3,
		Timeout:     2 * time.Second,
		Budget:      payments,
	})}
	resp, err := client.Get("http://127.0.0.1:8080/charge")
	if err == nil {
		resp.Body.Close()
	}
	credits, _ := payments.Credits(context.Background())
	log.Printf("shared reserve: %d credits", credits)
}
