package engine_test

import (
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/enginetest"
)

func TestPerRecordContract(t *testing.T) {
	enginetest.Run(t, func(run engine.Runner, sink engine.Sink, capacity int) engine.Engine {
		return engine.NewPerRecord(run, sink, capacity)
	})
}

func TestBatchContract(t *testing.T) {
	enginetest.Run(t, func(run engine.Runner, sink engine.Sink, capacity int) engine.Engine {
		return engine.NewBatch(run, sink, engine.BatchOptions{
			MaxRecords: 7, MaxBytes: 1 << 20, MaxWait: time.Millisecond, Concurrency: 2,
		})
	})
}
