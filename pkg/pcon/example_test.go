package pcon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// errBadPayload stands for a record the handler can never process.
var errBadPayload = errors.New("bad payload")

func Example() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	c, err := pcon.New(pcon.Config{
		Brokers:     []string{"localhost:9092"},
		Group:       "product-view-consumer",
		Topics:      []string{"product-events"},
		Ordering:    pcon.KeyOrder,
		MaxInFlight: 2000,
		MaxAttempts: 3,
		Backoff:     time.Second,
		Logger:      logger,
	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		if len(r.Value) == 0 {
			return pcon.Permanent(errBadPayload) // straight to product-events.DLT
		}
		return nil // do the work here; an error is retried
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Metrics: pconprom.NewCollector(c), in the pconprom module.

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		logger.Error("consumer stopped", "error", err)
	}
}

func ExampleBatchHandler() {
	h := pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		failed := map[int]error{}
		for i, r := range rs {
			if len(r.Value) == 0 {
				failed[i] = pcon.Permanent(errBadPayload)
			}
		}
		// Write the rest in one transaction here. Returning a plain error
		// would fail every record of the batch instead.
		if len(failed) > 0 {
			return &pcon.BatchError{Failed: failed}
		}
		return nil
	})
	_, err := pcon.New(pcon.Config{
		Brokers: []string{"localhost:9092"},
		Group:   "product-like-consumer",
		Topics:  []string{"like-events"},
		Batch:   pcon.BatchConfig{MaxRecords: 500, MaxWait: 20 * time.Millisecond},
	}, h)
	fmt.Println(err)
	// Output: <nil>
}

func ExampleConfig_Validate() {
	err := pcon.Config{Brokers: []string{"localhost:9092"}, Topics: []string{"orders"}, MaxInFlight: -1}.Validate()
	fmt.Println(err)
	// Output:
	// pcon: invalid config: Group: must not be empty
	// pcon: invalid config: MaxInFlight: must not be negative
}
