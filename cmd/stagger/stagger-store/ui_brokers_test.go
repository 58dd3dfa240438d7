package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	skafka "github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/internal/uievents"
)

// dashboardDLQ is a broker DLQ holding two dead letters, order-7 and
// order-8, dead for reason "permanent" with the error "<b>card declined</b>".
type dashboardDLQ struct {
	args   []string                 // stagger ui's flags for the DLQ
	source string                   // its name on the page, "KIND NAME"
	page   []string                 // more the dead-letters page must show
	counts func() (dlq, origin int) // dead letters left to redrive, messages in the origin
	secret string                   // a password that must not be printed ("" for none)
}

// checkDashboardRedrive runs `stagger ui` with d's DLQ and checks the
// dead-letters page lists both dead letters, a dry run says 2 would move
// and moves nothing, and a paced redrive moves both to the origin.
func checkDashboardRedrive(t *testing.T, d dashboardDLQ) {
	t.Helper()
	bin := buildStagger(t)
	db := filepath.Join(t.TempDir(), "q.db")
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "x"); code != exitOK {
		t.Fatal(e)
	}
	base, output := startUI(t, bin, nil, append([]string{"--db", db}, d.args...)...)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(p string) string {
		t.Helper()
		resp, err := c.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, b)
		}
		return string(b)
	}
	page := get("dead")
	for _, want := range append(d.page, "<td>"+d.source+"</td><td>order-7</td><td>permanent</td>",
		"<td>"+d.source+"</td><td>order-8</td><td>permanent</td>", "&lt;b&gt;card declined&lt;/b&gt;") {
		if !strings.Contains(page, want) {
			t.Errorf("the dead-letters page lacks %q:\n%s", want, page)
		}
	}
	if dlq, origin := d.counts(); dlq != 2 || origin != 0 {
		t.Fatalf("listing moved something: DLQ %d, origin %d", dlq, origin)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	post := func(form url.Values) (int, string) {
		t.Helper()
		form.Set("csrf", m[1])
		resp, err := c.PostForm(base+"act", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(url.Values{"op": {"redrive"}, "source": {d.source}, "dry": {"1"}}); code != 200 || !strings.Contains(body, "2 would move") {
		t.Fatalf("dry run: %d %s", code, body)
	}
	if dlq, origin := d.counts(); dlq != 2 || origin != 0 {
		t.Fatalf("the dry run moved something: DLQ %d, origin %d", dlq, origin)
	}
	if code, body := post(url.Values{"op": {"redrive"}, "source": {d.source}, "rate": {"50"}}); code != 303 {
		t.Fatalf("redrive: %d %s", code, body)
	}
	// The redrive runs in the dashboard's process; its queue events say
	// when it has ended (its source closed: every removal done).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := uievents.AwaitRedrives(ctx, c, base+"events/queues", d.source)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Moved != 2 || runs[0].Error != "" {
		t.Fatalf("the redrive ended with %+v; want 2 moved", runs[0])
	}
	if dlq, origin := d.counts(); dlq != 0 || origin != 2 {
		t.Fatalf("after the redrive: DLQ %d, origin %d; want 0 and 2", dlq, origin)
	}
	if page := get("dead"); strings.Contains(page, "<td>order-7</td>") || strings.Contains(page, "<td>order-8</td>") {
		t.Errorf("the dead-letters page still lists a redriven letter:\n%s", page)
	}
	if d.secret != "" && strings.Contains(output()+page, d.secret) {
		t.Errorf("the password was printed:\n%s", output())
	}
}

// A JetStream DLQ stream on the dead-letters page: listed, a dry run, a
// paced redrive back to the origin subject.
func TestUICommandJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, js, work, dlq, name := jetStreamStreams(t, "stg-ui")
	for i, id := range []string{"order-7", "order-8"} {
		m := nats.NewMsg(fmt.Sprintf("dlq.%s.work.1.%d", name, i+1))
		m.Data = []byte("payload")
		for k, v := range map[string]string{broker.HeaderReason: "permanent", broker.HeaderAttempt: "3", broker.HeaderOrigin: name + ".in",
			broker.HeaderID: id, broker.HeaderError: "<b>card declined</b>", "x-stagger-stream": name, "x-stagger-stream-seq": fmt.Sprint(i + 1)} {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	msgs := func(s jetstream.Stream) int {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Msgs)
	}
	// A server without authorization ignores a URL's user and password, so
	// the dashboard gets one: it must never print it.
	withPw, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	secret := ""
	if withPw.User == nil {
		withPw.User = url.UserPassword("ops", "s3cretpw")
		if probe, err := nats.Connect(withPw.String(), nats.Timeout(3*time.Second)); err == nil {
			probe.Close()
			secret = "s3cretpw"
		} else {
			withPw.User = nil
			t.Logf("NATS refuses a user and password (%v): the URL goes without them", err)
		}
	} else if p, ok := withPw.User.Password(); ok {
		secret = p
	}
	checkDashboardRedrive(t, dashboardDLQ{
		args:   []string{"--dlq", "jetstream:" + name + "_DLQ", "--nats", withPw.String()},
		source: "jetstream " + name + "_DLQ",
		counts: func() (int, int) { return msgs(dlq), msgs(work) },
		secret: secret,
	})
	raw, err := work.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw.Data) != "payload" || raw.Header.Get(broker.HeaderReason) != "" {
		t.Errorf("redriven message: %q headers %v", raw.Data, raw.Header)
	}
}

// A Kafka DLQ topic (an in-process kfake cluster) on the dead-letters
// page: listed, a dry run, a paced redrive back to the original topic.
// The DLQ is a log: what the redrive moved is what its consumer group
// committed.
func TestUICommandKafka(t *testing.T) {
	origin, dlqTopic := "orders", "orders-dlq"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, origin, dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	seeds := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, id := range []string{"order-7", "order-8"} {
		r := &kgo.Record{Topic: dlqTopic, Key: []byte(id), Value: []byte("payload")}
		for k, v := range map[string]string{broker.HeaderReason: "permanent", broker.HeaderAttempt: "3", broker.HeaderID: id,
			broker.HeaderError: "<b>card declined</b>", broker.HeaderOrigin: fmt.Sprintf("%s/0/%d", origin, i),
			skafka.HeaderTopic: origin, skafka.HeaderPartition: "0", skafka.HeaderOffset: fmt.Sprint(i)} {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	ends := func(topic string) int64 {
		o, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = o.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		o.Each(func(l kadm.ListedOffset) { n += l.Offset })
		return n
	}
	committed := func() int64 {
		o, err := adm.FetchOffsets(ctx, dlqTopic+"-redrive")
		if err != nil {
			return 0 // no group yet
		}
		n := int64(0)
		o.Each(func(r kadm.OffsetResponse) {
			if r.Topic == dlqTopic && r.Err == nil {
				n += r.At
			}
		})
		return n
	}
	checkDashboardRedrive(t, dashboardDLQ{
		args:   []string{"--dlq", "kafka:" + dlqTopic, "--kafka", strings.Join(seeds, ",")},
		source: "kafka " + dlqTopic,
		counts: func() (int, int) { return int(ends(dlqTopic) - committed()), int(ends(origin)) },
	})
}
