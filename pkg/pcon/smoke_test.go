package pcon_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	recs := e.produce(1000, func(i int) string { return strconv.Itoa(i % 10) })
	var n atomic.Int64
	_, stop := start(t, e.config("smoke"), pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		n.Add(1)
		return nil
	}))
	e.waitCommitted("smoke", endOffsets(recs))
	stop()
	t.Log("handled", n.Load())
}
