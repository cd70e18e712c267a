// Package devkafka starts the Kafka broker a person chose with the KAFKA
// switch, for `make dev`, `make kafka` and the benchmarks: Apache Kafka's
// own broker (KAFKA=real, a JVM process on loopback) or kfake, an in-process
// Kafka-protocol fake that needs no JDK (KAFKA=embedded).
package devkafka

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

// The values of the KAFKA switch.
const (
	Real     = "real"
	Embedded = "embedded"
)

// Kind reads the KAFKA switch from the environment, def when it is unset.
func Kind(def string) (string, error) {
	v := os.Getenv("KAFKA")
	if v == "" {
		v = def
	}
	if v != Real && v != Embedded {
		return "", fmt.Errorf("KAFKA must be %s or %s, got %q", Real, Embedded, v)
	}
	return v, nil
}

// Options configures Start.
type Options struct {
	Kind string // Real or Embedded
	// Port is the broker's port on 127.0.0.1; 0 picks a free one. With
	// more than one node, the nodes listen on Port, Port+2, Port+4, ...
	// (each node's controller one above its broker).
	Port int
	// Nodes is the number of combined broker/controller nodes of a real
	// cluster (1 when 0). From three on every topic has three replicas and
	// min.insync.replicas=2, as in production; Topics' replication is
	// raised to that. The embedded broker has one node only.
	Nodes int
	// Dir keeps a real broker's log (kept across runs); empty: a temporary
	// directory, removed when the broker stops.
	Dir string
	// Topics are created before Start returns.
	Topics []kafka.TopicSpec
	// JVMOptions are passed to a real broker's JVM.
	JVMOptions []string
}

// Broker is a running broker.
type Broker struct {
	// Brokers are its addresses.
	Brokers []string
	// Version names the broker and its release, for what a benchmark prints.
	Version string
	// Started is how long the broker took to answer, its topics created.
	Started time.Duration
	// Cluster is the real broker (nil when embedded).
	Cluster *kafkabroker.Cluster
	// Fake is the embedded broker (nil when real).
	Fake *kfake.Cluster
}

// Start starts the broker and creates opts.Topics on it.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	begin := time.Now()
	b := &Broker{}
	switch opts.Kind {
	case Real:
		o := kafkabroker.Options{Dir: opts.Dir, JVMOptions: opts.JVMOptions, Nodes: max(opts.Nodes, 1),
			// What compose sets: a group starts as soon as its first member
			// joins, instead of waiting 3 s for more.
			Props: map[string]string{"group.initial.rebalance.delay.ms": "0"}}
		if opts.Port != 0 {
			for i := range o.Nodes {
				o.Ports = append(o.Ports, opts.Port+2*i)
			}
		}
		opts.Topics = Replicated(opts.Topics, o.Nodes)
		c, err := kafkabroker.Start(ctx, o)
		if err != nil {
			return nil, err
		}
		b.Cluster, b.Brokers, b.Version = c, c.Brokers(), "Apache Kafka "+kafkabroker.Version
	case Embedded:
		if opts.Nodes > 1 {
			return nil, fmt.Errorf("devkafka: the embedded broker has one node, %d asked (a cluster needs the real one)", opts.Nodes)
		}
		var kopts []kfake.Opt
		kopts = append(kopts, kfake.NumBrokers(1))
		if opts.Port != 0 {
			kopts = append(kopts, kfake.Ports(opts.Port))
		}
		c, err := kfake.NewCluster(kopts...)
		if err != nil {
			return nil, fmt.Errorf("start the embedded broker on port %d: %w", opts.Port, err)
		}
		b.Fake, b.Brokers, b.Version = c, c.ListenAddrs(), "kfake "+kfakeVersion()+" (embedded)"
	default:
		return nil, fmt.Errorf("devkafka: unknown broker kind %q", opts.Kind)
	}
	if err := (kafka.Settings{Brokers: b.Brokers}).CreateTopics(ctx, opts.Topics); err != nil {
		_ = b.Close()
		return nil, err
	}
	b.Started = time.Since(begin)
	return b, nil
}

// Close stops the broker: a real one with a controlled shutdown.
func (b *Broker) Close() error {
	if b.Fake != nil {
		b.Fake.Close()
		return nil
	}
	return b.Cluster.Shutdown()
}

// Replication is the replication factor of the topics on a cluster of
// nodes: min(nodes, 3), as kafkabroker sets the default and the internal
// topics'.
func Replication(nodes int) int16 { return int16(min(max(nodes, 1), 3)) }

// MinInsync is the cluster's min.insync.replicas as kafkabroker sets it: 2
// from three nodes on, else 1.
func MinInsync(nodes int) int {
	if nodes >= 3 {
		return 2
	}
	return 1
}

// Replicated returns topics with the replication factor of a cluster of
// nodes.
func Replicated(topics []kafka.TopicSpec, nodes int) []kafka.TopicSpec {
	out := make([]kafka.TopicSpec, len(topics))
	for i, t := range topics {
		t.Replication = Replication(nodes)
		out[i] = t
	}
	return out
}

func kfakeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go/pkg/kfake" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}
