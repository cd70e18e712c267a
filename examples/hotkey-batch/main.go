// Command hotkey-batch consumes a topic of page views with a batch handler:
// one call gets a micro-batch of records, and the records of one key (one
// product, a hot one under a flash sale, say) that were waiting come in it
// together, in offset order. So a hot key moves a batch of records per call
// instead of one, and the handler can write them with one statement.
//
//	go run . -brokers localhost:9092 -topic views -group views-example
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka brokers, comma-separated")
	topic := flag.String("topic", "views", "the topic to consume; dead letters go to <topic>.DLT")
	group := flag.String("group", "hotkey-example", "the consumer group")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0 // the oldest broker version you run
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Up to Batch.Concurrency calls run at once (never two with records
	// of the same key), so what they share needs a lock.
	var (
		mu    sync.Mutex
		total int
	)
	c, err := pcon.New(pcon.Config{
		Brokers: strings.Split(*brokers, ","),
		Group:   *group,
		Topics:  []string{*topic},
		Sarama:  sc,
		Logger:  logger,
		Batch: pcon.BatchConfig{
			MaxRecords:  500,                   // per call
			MaxRun:      500,                   // of one key per call
			MaxWait:     20 * time.Millisecond, // fill a batch a little longer when a slot is free
			Concurrency: 4,                     // calls at once
		},
	}, pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		views := map[string]int{} // per product, to add in one write
		for _, r := range rs {
			views[string(r.Key)]++
		}
		// Write views here, e.g. one UPDATE ... FROM (VALUES ...). An error
		// fails the whole batch; a *pcon.BatchError fails only the records
		// it names.
		mu.Lock()
		total += len(rs)
		logger.Info("batch handled", "records", len(rs), "products", len(views), "total", total)
		mu.Unlock()
		return nil
	}))
	if err != nil {
		logger.Error("configure the consumer", "error", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = c.Run(ctx) // until SIGTERM or Ctrl-C
	stop()
	if err != nil {
		logger.Error("consumer stopped", "error", err)
		os.Exit(1)
	}
}
