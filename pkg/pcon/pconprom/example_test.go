package pconprom_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pconprom"
)

func ExampleNewCollector() {
	c, err := pcon.New(pcon.Config{
		Brokers: []string{"localhost:9092"},
		Group:   "product-view-consumer",
		Topics:  []string{"product-events"},
	}, pcon.RecordHandler(func(context.Context, *pcon.Record) error { return nil }))
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pconprom.NewCollector(c))
	srv := &http.Server{Addr: ":9090", Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	// c.Run(ctx) here; the metrics follow the consumer on every scrape.
}
