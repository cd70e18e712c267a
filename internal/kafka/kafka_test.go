package kafka_test

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
)

// TestConfig: the base configuration is valid as sarama judges it, and
// every producer built on it waits for all in-sync replicas and reports
// each outcome.
func TestConfig(t *testing.T) {
	t.Parallel()
	s := kafka.Settings{Brokers: []string{"k:9092"}}
	c := s.Config("svc")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.ClientID != "svc" || c.Version != kafka.Version || c.Producer.RequiredAcks != sarama.WaitForAll ||
		!c.Producer.Return.Successes || !c.Producer.Return.Errors {
		t.Errorf("config: client %q, version %s, acks %d, successes %v, errors %v",
			c.ClientID, c.Version, c.Producer.RequiredAcks, c.Producer.Return.Successes, c.Producer.Return.Errors)
	}
	if s.Config("other") == c {
		t.Error("Config returned a shared value; callers change theirs")
	}
}

// TestLoad: the variables, and a prefix Kafka could not name topics with
// refused with the variable's name.
func TestLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    kafka.Settings
		wantErr string
	}{
		{name: "brokers", env: map[string]string{"KAFKA_BROKERS": "a:9092, b:9092"},
			want: kafka.Settings{Brokers: []string{"a:9092", "b:9092"}}},
		{name: "prefix", env: map[string]string{"KAFKA_BROKERS": "a:9092", "KAFKA_PREFIX": "staging."},
			want: kafka.Settings{Brokers: []string{"a:9092"}, Prefix: "staging."}},
		{name: "no brokers", env: map[string]string{}, wantErr: "KAFKA_BROKERS"},
		{name: "prefix with a slash", env: map[string]string{"KAFKA_BROKERS": "a:9092", "KAFKA_PREFIX": "a/b"}, wantErr: "KAFKA_PREFIX"},
		{name: "prefix too long", env: map[string]string{"KAFKA_BROKERS": "a:9092", "KAFKA_PREFIX": strings.Repeat("p", 201)}, wantErr: "KAFKA_PREFIX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse(config.FromMap(tc.env), kafka.Load)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNames: topics and groups are named under the prefix, and a topic's
// domain is read back through it.
func TestNames(t *testing.T) {
	t.Parallel()
	s := kafka.Settings{Prefix: "staging."}
	got := []string{s.Topic("like-events"), s.Group("product-like-consumer"), s.Domain("staging.like-events.DLT"), s.Domain("staging.order-events")}
	want := []string{"staging.like-events", "staging.product-like-consumer", "like", "order"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	specs := s.PipelineTopics(3, 1)
	if len(specs) != 12 || specs[0].Name != "staging.like-events" || specs[0].Config["retention.ms"] != "604800000" {
		t.Errorf("pipeline topics: %+v", specs)
	}
}
