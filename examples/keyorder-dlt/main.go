// Command keyorder-dlt consumes a topic of orders in key order: the records
// of one key (one customer) run one at a time, in offset order, while the
// records of other keys run in parallel. An order the handler can never
// read goes to the dead-letter topic, <topic>.DLT, at once (pcon.Permanent);
// one that keeps failing goes there after three attempts. Either way the
// record is committed and the consumer moves on.
//
//	go run . -brokers localhost:9092 -topic orders -group orders-example
//
// The topic and its dead-letter topic must exist.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// order is the records' JSON value.
type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// errUnreadable marks a record no retry can help.
var errUnreadable = errors.New("unreadable order")

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka brokers, comma-separated")
	topic := flag.String("topic", "orders", "the topic to consume; dead letters go to <topic>.DLT")
	group := flag.String("group", "keyorder-example", "the consumer group")
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
		Ordering:    pcon.KeyOrder, // the default, said out loud
		MaxAttempts: 3,
		Backoff:     100 * time.Millisecond,
		Logger:      logger,
	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		var o order
		if err := json.Unmarshal(r.Value, &o); err != nil {
			// Straight to <topic>.DLT with the error in its headers.
			return pcon.Permanent(fmt.Errorf("%w: %w", errUnreadable, err))
		}
		// Do the work here; a plain error is retried, then dead-lettered.
		logger.Info("order handled", "customer", string(r.Key), "order", o.ID, "amount", o.Amount,
			"partition", r.Partition, "offset", r.Offset)
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
