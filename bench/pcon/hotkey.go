package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// batchCost is what the hot-key scenarios' batch handler costs per call,
// whatever the batch holds: one transaction, as the product consumers do.
const batchCost = time.Millisecond

// hotKeys measures the micro-batch engine on skewed keys: every record on
// one key, and keys drawn from Zipf(s = 1.1) over 10,000 keys. The baseline
// is the same handler and engine limited to one record per key per batch
// with a 10 ms linger, which is how batches were formed before key runs.
// The one-key topic also serves as a memory backlog of one key.
func (b *bench) hotKeys(out io.Writer) error {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	scenarios := []struct {
		name, topic string
		key         func(i int) string
		target      float64
		baselineN   int // the baseline moves one record per batch on a hot key: keep its drain short
	}{
		{"one key", "hot-one", func(int) string { return "hot" }, 50_000, max(100, b.o.hotBaseline/40)},
		{"Zipf(1.1), 10,000 keys", "hot-zipf", func(int) string { return "k" + strconv.FormatUint(z.Uint64(), 10) }, 200_000, b.o.hotBaseline},
	}
	fmt.Fprintf(out, "\nhot keys: BatchHandler costing %v per batch, MaxInFlight %d, %d records per topic\n\n", batchCost, b.o.maxInFlight, b.o.hotRecords)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "keys\tpcon rec/s\tbaseline\tbaseline rec/s\tratio\ttarget\t")
	var memLine string
	for _, sc := range scenarios {
		if err := b.createTopic(sc.topic); err != nil {
			return err
		}
		if err := b.produceKeyed(sc.topic, b.o.hotRecords, sc.key); err != nil {
			return err
		}
		var p, s float64
		for round := range b.o.rounds {
			sample := round == 0 && sc.topic == "hot-one"
			stop := func() (uint64, uint64) { return 0, 0 }
			if sample {
				stop = b.sampleHeap()
			}
			pr, err := b.batch(sc.topic, b.o.hotRecords, 0)
			before, peak := stop()
			if err != nil {
				return err
			}
			if sample {
				brokerCopy := ""
				if b.o.inProcess {
					brokerCopy = ", the broker's copy of the backlogs included"
				}
				memLine = fmt.Sprintf("memory: %d-record backlog of one key, batch handler: peak Go heap %.1f MB (%.1f MB before%s); target <= 150 MB: %s\n",
					b.o.hotRecords, mb(peak), mb(before), brokerCopy, verdict(peak <= 150<<20, "peak heap"))
			}
			sr, err := b.batch(sc.topic, min(sc.baselineN, b.o.hotRecords), 1)
			if err != nil {
				return err
			}
			p, s = max(p, pr), max(s, sr)
		}
		fmt.Fprintf(tw, "%s\t%.0f\tone record per key per batch, 10ms linger\t%.0f\t%.1fx\t%s\t\n", sc.name, p, s, p/s,
			verdict(p >= sc.target, fmt.Sprintf(">= %s rec/s", thousands(sc.target))))
	}
	tw.Flush()
	fmt.Fprint(out, "\n"+memLine)
	return nil
}

// batch measures a BatchHandler consumer draining n records; maxRun 1 is
// the baseline's one record per key per batch (with the old 10 ms linger),
// 0 the default key runs.
func (b *bench) batch(topic string, n, maxRun int) (float64, error) {
	prog := newProgress(n)
	bc := pcon.BatchConfig{MaxRun: maxRun}
	if maxRun == 1 {
		bc.MaxWait = 10 * time.Millisecond
	}
	c, err := pcon.New(pcon.Config{
		Brokers: b.o.brokers, Group: b.group(), Topics: []string{topic},
		Sarama: b.saramaConfig(), MaxInFlight: b.o.maxInFlight, RevokeGrace: time.Second, Batch: bc,
	}, pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		time.Sleep(batchCost)
		prog.addN(len(rs))
		return nil
	}))
	if err != nil {
		return 0, err
	}
	return measure("pcon", prog, c.Run)
}

// sampleHeap collects garbage, reads the Go heap, then samples it every
// 20 ms until the returned stop is called, which reports the heap before and
// its peak. Each new peak also writes the -memprofile heap profile.
func (b *bench) sampleHeap() (stop func() (before, peak uint64)) {
	runtime.GC()
	before := heapBytes()
	var max atomic.Uint64
	max.Store(before)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if h := heapBytes(); h > max.Load() {
					max.Store(h)
					b.writeHeapProfile()
				}
			}
		}
	})
	return func() (uint64, uint64) {
		close(done)
		wg.Wait()
		return before, max.Load()
	}
}

func (b *bench) produceKeyed(topic string, n int, key func(i int) string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.o.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.MaxBufferedRecords(50_000), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range n {
		wg.Add(1)
		r := &kgo.Record{Key: []byte(key(i)), Value: []byte("v" + strconv.Itoa(i))}
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

func thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
