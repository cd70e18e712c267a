// Command devkafka runs a Kafka broker for local development with every
// topic the pipeline uses created (each event topic with its dead-letter and
// parked topic, 3 partitions each), as infrastructure would create them:
// Apache Kafka's own broker with -kafka real (`make kafka`; its log is kept
// in -dir across runs; -nodes 3, `make kafka NODES=3`, a cluster of three
// with every topic replicated three times and min.insync.replicas=2), or an in-process Kafka-protocol fake that needs no
// JDK and keeps everything in memory (`make dev-kafka`, the default). It runs
// until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/service"
)

func main() {
	service.Main("devkafka", service.NoConfig, func(ctx context.Context, _ struct{}, logger *slog.Logger) error {
		return run(ctx, logger, os.Args[1:])
	})
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("devkafka", flag.ContinueOnError)
	kind := fs.String("kafka", devkafka.Embedded, "the broker: real (Apache Kafka, needs a JDK) or embedded (in-process)")
	port := fs.Int("port", 9092, "port to listen on (127.0.0.1)")
	partitions := fs.Int("partitions", 3, "partitions per topic")
	nodes := fs.Int("nodes", 1, "nodes of the real cluster: from 3 on every topic has 3 replicas and min.insync.replicas=2 (node i listens on port+2i)")
	dir := fs.String("dir", "", "where the real broker keeps its log, across runs (default .dev/kafka, .dev/kafka-N for N nodes)")
	prefix := fs.String("prefix", "", "KAFKA_PREFIX of the pipeline whose topics to create")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kind != devkafka.Real && *kind != devkafka.Embedded {
		return fmt.Errorf("-kafka must be %s or %s, got %q", devkafka.Real, devkafka.Embedded, *kind)
	}
	if *dir == "" {
		// A log directory holds one cluster's layout: each size its own.
		*dir = ".dev/kafka"
		if *nodes > 1 {
			*dir = fmt.Sprintf(".dev/kafka-%d", *nodes)
		}
	}
	topics := kafka.Settings{Prefix: *prefix}.PipelineTopics(int32(*partitions), 1)
	if *kind == devkafka.Real {
		logger.Info("starting Apache Kafka (the first run downloads its jars from Maven Central)", "dir", *dir)
	}
	b, err := devkafka.Start(ctx, devkafka.Options{Kind: *kind, Port: *port, Nodes: *nodes, Dir: *dir, Topics: topics})
	if err != nil {
		return fmt.Errorf("start broker on port %d: %w", *port, err)
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	logger.Info("Kafka broker ready", "broker", b.Version, "addrs", b.Brokers, "startup", b.Started.Round(1e6).String(),
		"topics", names, "partitions", *partitions, "replication", devkafka.Replication(*nodes), "minInsyncReplicas", devkafka.MinInsync(*nodes))
	<-ctx.Done()
	logger.Info("Kafka broker stopping")
	return b.Close()
}
