// Package redact hides the secrets of connection strings: the one rule every
// output path of stagger (logs, errors, usage messages, JSON) applies before
// it prints a connection string or a message that may hold one.
//
// It knows every form the project accepts:
//
//   - URLs of any scheme (postgres://, postgresql://, amqp://, amqps://,
//     nats://, tls://, redis://, rediss://, and mistyped ones): the password
//     of the user information ("user:xxxxx@"), the whole user information
//     when it is a token (nats://TOKEN@host, redis://PASSWORD@host, any
//     scheme but postgres, postgresql, amqp and amqps), and
//     every password-like query parameter;
//   - PostgreSQL key=value strings, quoted values included;
//   - user:password@host:port seeds (Kafka SASL written into a seed) and
//     URLs that lost their "//" (postgres:user:password@host);
//   - NATS nkey seeds (SU…, SA…, SO…: base32, 58 characters).
//
// A parameter or key is password-like when its name, in any case, contains
// pass, pwd, secret, token, key, seed or credential (password,
// sslpassword, sslkey, auth_token, …). When the structure is in doubt,
// more is hidden, never less: a user information that does not parse is
// hidden whole.
package redact

import (
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Mask is the text that replaces a secret.
const Mask = "xxxxx"

// minReplace is the shortest secret Text replaces wherever it occurs in a
// message: a one- or two-character password would turn every message into
// noise. String hides secrets of any length, by their position.
const minReplace = 3

// secretWords make a parameter or key password-like.
var secretWords = []string{"pass", "pwd", "secret", "token", "key", "seed", "credential"}

// IsSecretKey reports whether a parameter or key named name holds a secret.
func IsSecretKey(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

var (
	// schemeURL matches the start of a URL: scheme://.
	schemeURL = regexp.MustCompile(`^\s*([A-Za-z][A-Za-z0-9+.-]*)://`)
	// schemeish matches a leading word and a colon, with any slashes.
	schemeish = regexp.MustCompile(`^\s*([A-Za-z][A-Za-z0-9+.-]*):/*`)
	// listSep splits a list of URLs (nats://a,nats://b) before each one.
	listSep = regexp.MustCompile(`,\s*[A-Za-z][A-Za-z0-9+.-]*://`)
	// keywordStart matches a key=value string's first key.
	keywordStart = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_.-]*\s*=`)
	// keywordPair matches key = value, the value quoted ('a b\'c', the
	// closing quote optional: an unterminated quote hides the rest) or not.
	keywordPair = regexp.MustCompile(`(^|[\s(,;"])([A-Za-z_][A-Za-z0-9_.-]*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)
	// queryPair matches a URL's query parameter; its value runs to the
	// next '&' (a '#' in a password is taken as part of it).
	queryPair = regexp.MustCompile(`([?&])([^=&#\s]*)=([^&]*)`)
	// nkeySeed matches a NATS nkey seed.
	nkeySeed = regexp.MustCompile(`\bS[A-Z][A-Z2-7]{50,}\b`)
	// textUserinfo matches scheme://userinfo@ inside free text.
	textUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^\s"'<>]*)@`)
)

// userOnlyIsName are the schemes whose user information without a colon
// is a user name, not a token.
var userOnlyIsName = map[string]bool{"postgres": true, "postgresql": true, "amqp": true, "amqps": true}

// String returns the connection string s with every secret it holds
// replaced by Mask. The result does not depend on the secrets: two strings
// that differ only in a password give the same result.
func String(s string) string {
	s = nkeySeed.ReplaceAllString(s, Mask)
	if keywordStart.MatchString(s) && !schemeURL.MatchString(s) {
		return keywordPair.ReplaceAllStringFunc(s, maskPair)
	}
	// A list of URLs: each one on its own.
	if locs := listSep.FindAllStringIndex(s, -1); len(locs) > 0 {
		var b strings.Builder
		start := 0
		for _, l := range locs {
			b.WriteString(oneURL(s[start:l[0]]))
			b.WriteByte(',')
			start = l[0] + 1
		}
		b.WriteString(oneURL(s[start:]))
		return b.String()
	}
	return oneURL(s)
}

// maskPair hides the value of one keywordPair match whose key is
// password-like.
func maskPair(m string) string {
	sm := keywordPair.FindStringSubmatch(m)
	if sm == nil || !IsSecretKey(sm[2]) {
		return m
	}
	return sm[1] + sm[2] + sm[3] + Mask
}

// oneURL hides the secrets of one URL, seed or mistyped URL.
func oneURL(s string) string {
	// Query parameters first: a value may hold an '@'. The query starts
	// at the first '?' (a user information escapes its own).
	if q := strings.Index(s, "?"); q >= 0 {
		s = s[:q] + maskQuery(s[q:])
	}
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	if m := schemeURL.FindStringSubmatchIndex(s); m != nil && m[1] <= at {
		return s[:m[1]] + maskInfo(s[m[2]:m[3]], s[m[1]:at]) + s[at:]
	}
	// No "//": a seed (user:password@host:port) or a URL that lost its
	// slashes (postgres:user:password@host). A leading word and its colon
	// are kept only when another colon follows before the '@' (a scheme,
	// then user:password); the rest up to the '@' is hidden whole.
	head := 0
	if m := schemeish.FindStringSubmatchIndex(s); m != nil && m[1] <= at && strings.Count(s[m[1]:at], ":") > 0 {
		head = m[1]
	}
	return s[:head] + Mask + s[at:]
}

// maskInfo is the user information info of a scheme:// URL with its
// secret hidden: user:xxxxx, the user name alone when the scheme takes one
// without a password, else xxxxx.
func maskInfo(scheme, info string) string {
	user, _, hasColon := strings.Cut(info, ":")
	switch {
	case hasColon && !strings.ContainsAny(user, "/?#@"):
		return user + ":" + Mask
	case !hasColon && userOnlyIsName[strings.ToLower(scheme)] && !strings.ContainsAny(info, "/?#@"):
		return info
	}
	return Mask
}

// Secrets returns the secrets the connection string s holds, each in every
// form a message may print it (as written, decoded, escaped, quoted),
// longest first.
func Secrets(s string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		for _, f := range forms(p) {
			if f != "" && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	for _, m := range nkeySeed.FindAllString(s, -1) {
		add(m)
	}
	for _, m := range keywordPair.FindAllStringSubmatch(s, -1) {
		if IsSecretKey(m[2]) {
			add(unquote(m[4]))
			add(m[4])
		}
	}
	for _, part := range splitList(s) {
		query := ""
		if q := strings.Index(part, "?"); q >= 0 {
			query = part[q:]
		}
		for _, m := range queryPair.FindAllStringSubmatch(query, -1) {
			if IsSecretKey(m[2]) || IsSecretKey(unescape(m[2])) {
				add(m[3])
			}
		}
		at := strings.LastIndex(part, "@")
		if at < 0 {
			continue
		}
		start := 0
		if m := schemeish.FindStringIndex(part); m != nil && m[1] <= at {
			start = m[1]
		}
		info := part[start:at]
		// Every reading: the whole user information, what follows its
		// first colon, and what follows each colon.
		if m := schemeURL.FindStringSubmatch(part); m == nil || !userOnlyIsName[strings.ToLower(m[1])] || strings.Contains(info, ":") {
			add(info)
		}
		for i := strings.Index(info, ":"); i >= 0; {
			add(info[i+1:])
			j := strings.Index(info[i+1:], ":")
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// splitList splits a list of URLs before each scheme.
func splitList(s string) []string {
	var parts []string
	start := 0
	for _, l := range listSep.FindAllStringIndex(s, -1) {
		parts = append(parts, s[start:l[0]])
		start = l[0] + 1
	}
	return append(parts, s[start:])
}

// forms are the ways p may be printed: as is, decoded, escaped, quoted.
func forms(p string) []string {
	out := []string{p}
	if d := unescape(p); d != p {
		out = append(out, d)
	}
	if d, err := url.QueryUnescape(p); err == nil && d != p {
		out = append(out, d)
	}
	for _, v := range out[:len(out):len(out)] {
		q := strconv.Quote(v)
		out = append(out, url.QueryEscape(v), url.PathEscape(v), q[1:len(q)-1])
	}
	return out
}

func unescape(p string) string {
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// unquote is a key=value string's value without its quotes and escapes.
func unquote(v string) string {
	if !strings.HasPrefix(v, "'") {
		return v
	}
	v = strings.TrimSuffix(v[1:], "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// Text returns msg with the connection strings conns hidden (each shown as
// String shows it) and every secret they hold, in any form, replaced by
// Mask (secrets shorter than three characters only where they are found by
// position). Beyond conns, it hides what looks like a secret in any text: a
// URL's user information, a password-like key=value or query parameter, an
// nkey seed.
func Text(msg string, conns ...string) string {
	cs := append([]string(nil), conns...)
	sort.SliceStable(cs, func(i, j int) bool { return len(cs[i]) > len(cs[j]) })
	for _, c := range cs {
		if t := strings.TrimSpace(c); t != "" {
			msg = strings.ReplaceAll(msg, t, String(t))
		}
	}
	var secrets []string
	for _, c := range cs {
		secrets = append(secrets, Secrets(c)...)
	}
	sort.SliceStable(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, p := range secrets {
		if len(p) >= minReplace && p != Mask {
			msg = strings.ReplaceAll(msg, p, Mask)
		}
	}
	msg = nkeySeed.ReplaceAllString(msg, Mask)
	msg = textUserinfo.ReplaceAllStringFunc(msg, func(m string) string {
		sm := textUserinfo.FindStringSubmatch(m)
		return sm[1] + maskInfo(strings.TrimSuffix(sm[1], "://"), sm[2]) + "@"
	})
	msg = keywordPair.ReplaceAllStringFunc(msg, maskPair)
	return maskQuery(msg)
}

// maskQuery hides the values of the password-like query parameters in s.
func maskQuery(s string) string {
	return queryPair.ReplaceAllStringFunc(s, func(m string) string {
		sm := queryPair.FindStringSubmatch(m)
		if IsSecretKey(sm[2]) || IsSecretKey(unescape(sm[2])) {
			return sm[1] + sm[2] + "=" + Mask
		}
		return m
	})
}

// Error returns err with its message passed through Text(msg, conns...);
// it unwraps to err, for errors.Is and errors.As (never print what they
// find). A nil err gives nil.
func Error(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	return &redacted{msg: Text(err.Error(), conns...), err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
