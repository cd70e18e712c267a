// Command metrics runs a consumer with its state as Prometheus metrics
// (pconprom, a module of its own) on http://<addr>/metrics: true lag per
// partition (records not complete yet, which a client's lag hides when
// records complete out of order), the offset holding commits back and for
// how long, records in flight, retries, dead letters, handler latency.
//
//	go run . -brokers localhost:9092 -topic events -group events-example -addr :9464
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pconprom"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka brokers, comma-separated")
	topic := flag.String("topic", "events", "the topic to consume; dead letters go to <topic>.DLT")
	group := flag.String("group", "metrics-example", "the consumer group")
	addr := flag.String("addr", ":9464", "where to serve /metrics")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0 // the oldest broker version you run
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	c, err := pcon.New(pcon.Config{
		Brokers: strings.Split(*brokers, ","),
		Group:   *group,
		Topics:  []string{*topic},
		Sarama:  sc,
		Logger:  logger,
	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		return nil // the work
	}))
	if err != nil {
		logger.Error("configure the consumer", "error", err)
		os.Exit(2)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), pconprom.NewCollector(c))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener", "error", err)
			os.Exit(1)
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	runErr := c.Run(ctx)
	stop()
	// The last scrape may still be in flight.
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(shutdown)
	cancel()
	if runErr != nil {
		logger.Error("consumer stopped", "error", runErr)
		os.Exit(1)
	}
}
