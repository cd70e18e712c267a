package kafka_test

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/kafka"
)

// TestConfig: the base configuration is valid as sarama judges it, and
// every producer built on it waits for all in-sync replicas and reports
// each outcome.
func TestConfig(t *testing.T) {
	t.Parallel()
	c := kafka.Config("svc")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.ClientID != "svc" || c.Version != kafka.Version || c.Producer.RequiredAcks != sarama.WaitForAll ||
		!c.Producer.Return.Successes || !c.Producer.Return.Errors {
		t.Errorf("config: client %q, version %s, acks %d, successes %v, errors %v",
			c.ClientID, c.Version, c.Producer.RequiredAcks, c.Producer.Return.Successes, c.Producer.Return.Errors)
	}
	if kafka.Config("other") == c {
		t.Error("Config returned a shared value; callers change theirs")
	}
}
