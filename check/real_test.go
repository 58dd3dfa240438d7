package check_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestTransportDefault guards retryhttp.New(nil, nil) against the lab's
// outage in real time (a transport cannot run in virtual time): at most
// its 3 attempts per request, no burst past them.
func TestTransportDefault(t *testing.T) {
	e := check.LabOutage(
		check.Transport("retryhttp.New(nil, nil)", func(base http.RoundTripper) http.RoundTripper { return retryhttp.New(base, nil) }),
		check.Retry("retry nil Policy", nil),
	)
	res, err := check.RunReal(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	res.Check(t, check.MaxAmplification(3), check.MaxPeakPerWindow(12), check.NotMetastable())
	tr := res.Policy("retryhttp.New(nil, nil)")
	if tr.Requests != 4 || tr.Attempts < 8 {
		t.Fatalf("the transport's 4 requests made %d attempts in a 700 ms outage; want retries", tr.Attempts)
	}
	virt, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if len(virt.Skipped) != 1 || len(virt.Policies) != 1 {
		t.Fatalf("virtual time must skip the transport and run the policy: skipped %q", virt.Skipped)
	}
}
