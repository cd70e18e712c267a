package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Retention of the event and dead-letter topics (7 days), the topics'
// retention.ms in compose and the manifests. Parked topics keep theirs
// events.ParkedRetention.
const Retention = 7 * 24 * time.Hour

// TopicSpec is a topic as infrastructure creates it.
type TopicSpec struct {
	Name        string
	Partitions  int32
	Replication int16
	// Config holds topic-level settings (retention.ms, segment.bytes...).
	Config map[string]string
}

// PipelineTopics lists every topic the pipeline uses, named on the cluster:
// each event topic with its .DLT and .PARKED topic, with partitions each
// and replication copies, and the retention compose's kafka-topics job and
// the manifests' KafkaTopics give them.
func (s Settings) PipelineTopics(partitions int32, replication int16) []TopicSpec {
	var out []TopicSpec
	for _, name := range events.NewRegistry().AllTopics() {
		retention := Retention
		if strings.HasSuffix(name, events.ParkedSuffix) {
			retention = events.ParkedRetention
		}
		out = append(out, TopicSpec{
			Name: s.Topic(name), Partitions: partitions, Replication: replication,
			Config: map[string]string{"retention.ms": strconv.FormatInt(retention.Milliseconds(), 10)},
		})
	}
	return out
}

// CreateTopics creates each topic of specs that does not exist yet and
// waits until every partition of every one of them has a leader, so that a
// producer's first record finds it.
func (s Settings) CreateTopics(ctx context.Context, specs []TopicSpec) error {
	cfg := s.Config("topic-admin")
	cfg.Admin.Timeout = 30 * time.Second
	client, err := sarama.NewClient(s.Brokers, cfg)
	if err != nil {
		return fmt.Errorf("connect to Kafka %v: %w", s.Brokers, err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	// Closing the admin would close the shared client twice; the deferred
	// client.Close releases both.
	names := make([]string, len(specs))
	for i, t := range specs {
		names[i] = t.Name
		detail := &sarama.TopicDetail{NumPartitions: t.Partitions, ReplicationFactor: t.Replication, ConfigEntries: map[string]*string{}}
		for k, v := range t.Config {
			detail.ConfigEntries[k] = &v
		}
		if err := admin.CreateTopic(t.Name, detail, false); err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.Name, err)
		}
	}
	for {
		err := leadersKnown(client, names)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v: %w (%w)", names, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func leadersKnown(client sarama.Client, topics []string) error {
	if err := client.RefreshMetadata(topics...); err != nil {
		return err
	}
	for _, t := range topics {
		parts, err := client.Partitions(t)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		for _, p := range parts {
			if _, err := client.Leader(t, p); err != nil {
				return fmt.Errorf("%s/%d: %w", t, p, err)
			}
		}
	}
	return nil
}

// DeleteTopics deletes topics, ignoring those that do not exist.
func (s Settings) DeleteTopics(names ...string) error {
	admin, err := sarama.NewClusterAdmin(s.Brokers, s.Config("topic-admin"))
	if err != nil {
		return fmt.Errorf("connect to Kafka %v: %w", s.Brokers, err)
	}
	defer admin.Close()
	var errs []error
	for _, n := range names {
		if err := admin.DeleteTopic(n); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
