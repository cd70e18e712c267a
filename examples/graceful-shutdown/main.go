// Command graceful-shutdown shows how a consumer stops without losing or
// repeating work: on SIGTERM (what Kubernetes, systemd and docker stop
// send) or Ctrl-C, Run stops taking records, gives the handler calls in
// flight Config.RevokeGrace to finish, commits what completed, leaves the
// group and returns nil. A handler that watches its context stops a long
// call early instead; its record is not committed and runs again on the
// next owner of the partition.
//
//	go run . -brokers localhost:9092 -topic jobs -group jobs-example
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka brokers, comma-separated")
	topic := flag.String("topic", "jobs", "the topic to consume; dead letters go to <topic>.DLT")
	group := flag.String("group", "shutdown-example", "the consumer group")
	work := flag.Duration("work", 50*time.Millisecond, "how long each record's work takes")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0 // the oldest broker version you run
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	c, err := pcon.New(pcon.Config{
		Brokers:     strings.Split(*brokers, ","),
		Group:       *group,
		Topics:      []string{*topic},
		Sarama:      sc,
		MaxInFlight: 20,
		// Shorter than the orchestrator's grace period (Kubernetes: 30 s
		// by default), so that Run returns before a SIGKILL.
		RevokeGrace: 10 * time.Second,
		Logger:      logger,
	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		select {
		case <-time.After(*work): // the work
		case <-ctx.Done():
			return ctx.Err() // past RevokeGrace: give up, the record runs again elsewhere
		}
		logger.Info("job done", "partition", r.Partition, "offset", r.Offset)
		return nil
	}))
	if err != nil {
		logger.Error("configure the consumer", "error", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	start := time.Now()
	err = c.Run(ctx)
	stop()
	if err != nil {
		logger.Error("consumer stopped", "error", err)
		os.Exit(1)
	}
	// Run returned nil: every record handled is committed and every
	// goroutine of the consumer has ended.
	logger.Info("stopped cleanly", "ran", time.Since(start).Round(time.Millisecond))
}
