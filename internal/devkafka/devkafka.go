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
	// Port is the broker's port on 127.0.0.1; 0 picks a free one.
	Port int
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
		o := kafkabroker.Options{Dir: opts.Dir, JVMOptions: opts.JVMOptions,
			// What compose sets: a group starts as soon as its first member
			// joins, instead of waiting 3 s for more.
			Props: map[string]string{"group.initial.rebalance.delay.ms": "0"}}
		if opts.Port != 0 {
			o.Ports = []int{opts.Port}
		}
		c, err := kafkabroker.Start(ctx, o)
		if err != nil {
			return nil, err
		}
		b.Cluster, b.Brokers, b.Version = c, c.Brokers(), "Apache Kafka "+kafkabroker.Version
	case Embedded:
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
