// Command devkafka runs an in-process Kafka-protocol broker for local
// development, with every topic and dead-letter topic the pipeline uses
// already created (3 partitions each), as infrastructure would create them.
// It keeps data in memory only and runs until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

func main() {
	service.Main("devkafka", service.NoConfig, func(ctx context.Context, _ struct{}, logger *slog.Logger) error {
		return run(ctx, logger, os.Args[1:])
	})
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("devkafka", flag.ContinueOnError)
	port := fs.Int("port", 9092, "port to listen on (127.0.0.1)")
	partitions := fs.Int("partitions", 3, "partitions per topic")
	if err := fs.Parse(args); err != nil {
		return err
	}
	topics := events.NewRegistry().AllTopics()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(*port),
		kfake.SeedTopics(int32(*partitions), topics...),
	)
	if err != nil {
		return fmt.Errorf("start broker on port %d: %w", *port, err)
	}
	defer c.Close()
	logger.Info("dev Kafka broker ready", "addrs", c.ListenAddrs(), "topics", topics, "partitions", *partitions)
	<-ctx.Done()
	logger.Info("dev Kafka broker stopping")
	return nil
}
