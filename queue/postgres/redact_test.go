package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/queue/postgres"
)

// TestOpenHidesEverySecret: Open's errors show no password of any form of
// connection string, on a closed port or when it does not parse.
func TestOpenHidesEverySecret(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u@127.0.0.1:1/db?sslpassword=Pw-s3cr3t&connect_timeout=1",
		"postgres://u@127.0.0.1:1/db?password=Pw-s3cr3t&connect_timeout=1",
		"host=127.0.0.1 port=1 user=u password='Pw s3cr3t' sslpassword=Pw-s3cr3t connect_timeout=1",
		"postgres://u:Pw-s3cr3t@127.0.0.1:99999/db",
		"host=127.0.0.1 password='Pw-s3cr3t",
	} {
		_, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%q): %v", dsn, err)
		}
	}
}
