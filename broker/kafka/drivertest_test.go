package kafka

import (
	"testing"

	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverSuite runs the retry drivers' suite (retry/drivertest)
// through the adapter's Consumer on Kafka (kfake, in process): every case's message is
// consumed, retried through the delay tiers and dead-lettered by the
// adapter's own code, and must make the calls retry.Do makes and end as
// it ends (see brokertest.Consumer for the cases a consumer skips).
func TestDriverSuite(t *testing.T) {
	drivertest.Run(t, brokertest.Consumer("kafka.Consumer", func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, nil)
	}))
}
