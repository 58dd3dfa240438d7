package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// The secret of every case is "Pw-s3cr3t" or a form of it.
const pw = "Pw-s3cr3t"

// seed is a NATS user nkey seed (58 base32 characters).
const seed = "SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU"

var cases = []struct{ in, want string }{
	{"postgres://u:Pw-s3cr3t@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
	{"POSTGRESQL://u:Pw-s3cr3t@h/db", "POSTGRESQL://u:xxxxx@h/db"},
	{"postgres://u@h/db", "postgres://u@h/db"},
	{"postgres://u@h/db?password=Pw-s3cr3t&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
	{"postgres://u@h/db?sslmode=verify-full&sslpassword=Pw-s3cr3t", "postgres://u@h/db?sslmode=verify-full&sslpassword=xxxxx"},
	{"postgres://u@h/db?sslkey=/k/Pw-s3cr3t.key&x=1", "postgres://u@h/db?sslkey=xxxxx&x=1"},
	{"postgres://u:Pw%40s3cr3t@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:Pw@s3cr3t@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:Pw-s3cr3t@h1:5432,h2:5433/db", "postgres://u:xxxxx@h1:5432,h2:5433/db"},
	{"postgres://u:Pw-s3cr3t@[bad/db", "postgres://u:xxxxx@[bad/db"},
	{" postgres://u:Pw-s3cr3t@h/db ", " postgres://u:xxxxx@h/db "},
	{"postgres:postgres:Pw-s3cr3t@127.0.0.1:1", "postgres:xxxxx@127.0.0.1:1"},
	{"postgress://u:Pw-s3cr3t@h/db", "postgress://u:xxxxx@h/db"},
	{"pg://Pw-s3cr3t@h/db", "pg://xxxxx@h/db"},
	{"host=h port=5432 user=u password=Pw-s3cr3t dbname=d", "host=h port=5432 user=u password=xxxxx dbname=d"},
	{`host=h password='a b\' Pw-s3cr3t' dbname=d`, "host=h password=xxxxx dbname=d"},
	{"host=h PASSWORD = Pw-s3cr3t sslpassword=Pw-s3cr3t", "host=h PASSWORD = xxxxx sslpassword=xxxxx"},
	{"host=h password='Pw-s3cr3t", "host=h password=xxxxx"},
	{"amqp://guest:Pw-s3cr3t@h:5672/vhost", "amqp://guest:xxxxx@h:5672/vhost"},
	{"amqps://u:Pw-s3cr3t@h/", "amqps://u:xxxxx@h/"},
	{"nats://Pw-s3cr3t@h:4222", "nats://xxxxx@h:4222"},
	{"nats://u:Pw-s3cr3t@h:4222", "nats://u:xxxxx@h:4222"},
	{"nats://Pw-s3cr3t@h1:4222, nats://u:Pw-s3cr3t@h2:4222", "nats://xxxxx@h1:4222, nats://u:xxxxx@h2:4222"},
	{"tls://Pw-s3cr3t@h:4222", "tls://xxxxx@h:4222"},
	{seed, Mask},
	{"nkey " + seed + " for u", "nkey xxxxx for u"},
	{"redis://:Pw-s3cr3t@h:6379/0", "redis://:xxxxx@h:6379/0"},
	{"redis://Pw-s3cr3t@h:6379", "redis://xxxxx@h:6379"},
	{"rediss://u:Pw-s3cr3t@h:6380", "rediss://u:xxxxx@h:6380"},
	{"u:Pw-s3cr3t@h:9092", "xxxxx@h:9092"},
	{"u:Pw-s3cr3t@h1:9092,h2:9092", "xxxxx@h1:9092,h2:9092"},
	{"kafka://u:Pw-s3cr3t@h:9092", "kafka://u:xxxxx@h:9092"},
	{"./q.db", "./q.db"},
	{"h:9092", "h:9092"},
}

func TestString(t *testing.T) {
	for _, c := range cases {
		got := String(c.in)
		if got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "s3cr3t") || strings.Contains(got, seed) {
			t.Errorf("String(%q) = %q shows the secret", c.in, got)
		}
	}
}

// wholePw matches pw as a whole secret, not a part of one.
var wholePw = regexp.MustCompile(`(^|[:= ])` + pw + `($|[@& ])`)

// Text hides a connection string and its secrets in every form a driver
// may print them: as written, decoded, escaped, in %q.
func TestText(t *testing.T) {
	alone := 0
	for _, c := range cases {
		msgs := []string{
			"connect to " + c.in + ": refused",
			fmt.Sprintf("open %q: no such file", c.in),
			"lookup " + strings.TrimSpace(c.in) + ": no such host",
		}
		if wholePw.MatchString(c.in) { // the driver repeats the password alone
			alone++
			msgs = append(msgs, "auth failed for password "+pw+" ("+url.QueryEscape(pw)+")")
		}
		if strings.Contains(c.in, "Pw%40s3cr3t") { // or decoded
			msgs = append(msgs, "auth failed for password Pw@s3cr3t")
		}
		for _, msg := range msgs {
			if got := Text(msg, c.in); strings.Contains(got, "s3cr3t") || strings.Contains(got, seed) {
				t.Errorf("Text(%q, %q) = %q shows the secret", msg, c.in, got)
			}
		}
	}
	if alone < 20 {
		t.Errorf("only %d cases hold the password whole", alone)
	}
	// Free text, no connection string known.
	for _, msg := range []string{
		"dial nats://Pw-s3cr3t@h:4222: refused",
		"bad DSN host=h password=Pw-s3cr3t dbname=d",
		"GET http://h/x?token=Pw-s3cr3t&a=1",
		"seed " + seed,
	} {
		if got := Text(msg); strings.Contains(got, "s3cr3t") || strings.Contains(got, seed) {
			t.Errorf("Text(%q) = %q shows the secret", msg, got)
		}
	}
	if got, want := Text("open ./q.db: disk full", "./q.db"), "open ./q.db: disk full"; got != want {
		t.Errorf("Text changed a message without secrets: %q, want %q", got, want)
	}
}

func TestError(t *testing.T) {
	base := fmt.Errorf("dial postgres://u:%s@h/db: %w", pw, fs.ErrNotExist)
	err := Error(base, "postgres://u:"+pw+"@h/db")
	if strings.Contains(err.Error(), "s3cr3t") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Error: %q (Is ErrNotExist %v)", err, errors.Is(err, fs.ErrNotExist))
	}
	if Error(nil, "x") != nil {
		t.Fatal("Error(nil) != nil")
	}
}

func TestIsSecretKey(t *testing.T) {
	for k, want := range map[string]bool{
		"password": true, "PASSWORD": true, "sslpassword": true, "sslkey": true, "auth_token": true, "client_secret": true,
		"passfile": true, "nkey_seed": true, "host": false, "user": false, "dbname": false, "sslmode": false,
	} {
		if IsSecretKey(k) != want {
			t.Errorf("IsSecretKey(%q) = %v", k, !want)
		}
	}
}
