package redact

import (
	"net/url"
	"strings"
	"testing"
	"unicode"
)

// libpqQuote is v as a quoted value of a key=value connection string.
func libpqQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// unquoted is v without what would end an unquoted value.
func unquoted(v string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '\'' || r == '\\' {
			return -1
		}
		return r
	}, v)
}

// templates build a connection string of every form around a password p,
// written as its driver expects it (escaped or quoted). No template holds
// a 'Q'.
var templates = []func(p string) string{
	func(p string) string {
		return "postgres://" + url.UserPassword("u", p).String() + "@h:5432/db?sslmode=disable"
	},
	func(p string) string { return "postgresql://" + url.UserPassword("u", p).String() + "@h1,h2/db" },
	func(p string) string { return "postgres://u@h/db?password=" + url.QueryEscape(p) + "&x=1" },
	func(p string) string { return "postgres://u@h/db?sslmode=require&sslpassword=" + url.QueryEscape(p) },
	func(p string) string { return "host=h user=u password=" + libpqQuote(p) + " dbname=d" },
	func(p string) string { return "host=h sslpassword = " + libpqQuote(p) },
	func(p string) string { return "postgres:" + url.UserPassword("postgres", p).String() + "@127.0.0.1:1" },
	func(p string) string { return "postgress://" + url.UserPassword("u", p).String() + "@127.0.0.1:1/db" },
	func(p string) string { return "amqp://" + url.UserPassword("guest", p).String() + "@h:5672/v" },
	func(p string) string { return "nats://" + url.User(p).String() + "@h:4222" },
	func(p string) string { return "nats://" + url.UserPassword("u", p).String() + "@h:4222,nats://h2:4222" },
	func(p string) string { return "redis://" + url.UserPassword("", p).String() + "@h:6379/0" },
	func(p string) string { return "rediss://" + url.User(p).String() + "@h:6380" },
	func(p string) string { return url.UserPassword("u", p).String() + "@h:9092,h2:9092" },
}

// FuzzString: what String shows of a connection string does not depend on
// its password, and no character of a password (marked by a 'Q') reaches
// the output of String or of Text, which also sees the password alone in
// the message.
func FuzzString(f *testing.F) {
	for _, s := range []string{"Q", "Qs3cr3t", "a:b@cQ", "Q'\\ x", "Q%40", "Q?password=x#y", "Q&sslkey=", "Q\n\t", "日本Q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !strings.Contains(p, "Q") {
			p += "Q"
		}
		tmpls := append(templates[:len(templates):len(templates)], func(p string) string { return "host=h password=" + p + " port=1" })
		for i, tmpl := range tmpls {
			if i == len(templates) { // an unquoted value: the password as it can be written there
				if p = unquoted(p); !strings.Contains(p, "Q") {
					continue
				}
			}
			conn := tmpl(p)
			got, ref := String(conn), String(tmpl("zzz"))
			if got != ref {
				t.Fatalf("template %d: String(%q) = %q, but %q with another password", i, conn, got, ref)
			}
			if strings.Contains(got, "Q") {
				t.Fatalf("template %d: String(%q) = %q shows the password", i, conn, got)
			}
			if len(p) < minReplace {
				continue
			}
			msg := "failed to connect to " + conn + ": password " + p + " rejected (" + url.QueryEscape(p) + ")"
			if out := Text(msg, conn); strings.Contains(out, "Q") {
				t.Fatalf("template %d: Text(%q) = %q shows the password", i, msg, out)
			}
		}
	})
}
