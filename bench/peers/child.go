package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// childEnv names the variable under which this program runs as one of our
// peers' processes instead of the benchmark: the pcon consumer, or
// watermill's forwarder. Each runs in a process of its own, as the Java
// peers do, so that its CPU is read from /proc the same way.
const childEnv = "BENCH_PEERS_CHILD"

type child string

const (
	pconChild      child = "pcon"
	watermillChild child = "watermill"
)

// runChild runs the child named by childEnv, if any, and reports whether it
// did.
func runChild() (bool, error) {
	switch c := child(os.Getenv(childEnv)); c {
	case "":
		return false, nil
	case pconChild:
		return true, pconPeer(os.Args[1:])
	case watermillChild:
		return true, watermillPeer(os.Args[1:])
	default:
		return true, fmt.Errorf("%s=%s: unknown child", childEnv, c)
	}
}

var orderings = map[string]pcon.Ordering{"KEY": pcon.KeyOrder, "PARTITION": pcon.PartitionOrder, "UNORDERED": pcon.Unordered}

// pconPeer is the Parallel Consumer peer's counterpart: pcon with a
// RecordHandler doing what Peer.java's handler does, printing the same
// JSON line.
func pconPeer(args []string) error {
	fs := flag.NewFlagSet("pcon-peer", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "")
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	records := fs.Int("records", 0, "")
	sleepMS := fs.Int("sleep-ms", 0, "")
	ordering := fs.String("ordering", "KEY", "")
	concurrency := fs.Int("concurrency", pcon.Config{}.MaxConcurrency, "")
	// Booleans are given as "--name value" pairs, as Peer.java reads them,
	// which the flag package's boolean flags do not take.
	checkOrderArg := fs.String("check-order", "true", "")
	liveArg := fs.String("live", "false", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	checkOrder, err := strconv.ParseBool(*checkOrderArg)
	if err != nil {
		return fmt.Errorf("--check-order: %w", err)
	}
	live, err := strconv.ParseBool(*liveArg)
	if err != nil {
		return fmt.Errorf("--live: %w", err)
	}
	ord, ok := orderings[*ordering]
	if !ok {
		return fmt.Errorf("unknown ordering %q", *ordering)
	}
	n := *records
	sleep := time.Duration(*sleepMS) * time.Millisecond
	check := checkOrder && ord == pcon.KeyOrder
	var (
		done, violations atomic.Int64
		recorded         atomic.Int64
		first, last      atomic.Int64
		lastSeq          sync.Map
		late             []int64
		finished         = make(chan struct{})
	)
	if live {
		late = make([]int64, n)
	}
	sc := kafka.Settings{Brokers: strings.Split(*brokers, ",")}.Config("peers-pcon")
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg := pcon.Config{
		Brokers: strings.Split(*brokers, ","), Group: *group, Topics: []string{*topic},
		Sarama: sc, Ordering: ord,
		// The cap on handler calls, as the Parallel Consumer's
		// maxConcurrency caps its handler threads; the records buffered
		// behind them are bounded by pcon's default MaxInFlight.
		MaxConcurrency: *concurrency,
	}
	h := pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		if sleep > 0 {
			time.Sleep(sleep)
		}
		seq := int64(binary.BigEndian.Uint64(r.Value))          //nolint:gosec // written from an int64
		intended := int64(binary.BigEndian.Uint64(r.Value[8:])) //nolint:gosec // written from an int64
		if check {
			// KeyOrder runs one record of a key at a time: the swap is the
			// key's alone.
			prev, loaded := lastSeq.Swap(string(r.Key), seq)
			want := int64(0)
			if loaded {
				want = prev.(int64) + 1
			}
			if seq != want {
				violations.Add(1)
			}
		}
		now := time.Now().UnixNano()
		k := done.Add(1)
		if k == 1 {
			first.Store(now)
		}
		if late != nil && k <= int64(n) {
			late[k-1] = now - intended
		}
		// Finished once every record's lateness is written, not when the
		// n-th record is counted: a record counted earlier may still be
		// writing its own.
		if recorded.Add(1) == int64(n) {
			last.Store(now)
			close(finished)
		}
		return nil
	})
	consumer, err := pcon.New(cfg, h)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- consumer.Run(ctx) }()
	select {
	case <-finished:
	case err := <-errc:
		return fmt.Errorf("pcon stopped after %d of %d records: %w", done.Load(), n, err)
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("pcon handled %d of %d records before the timeout", done.Load(), n)
	}
	res := peerResult{
		Peer: "pcon", Version: "this tree", Client: "sarama " + moduleVersion("github.com/IBM/sarama"),
		Ordering: *ordering, Concurrency: *concurrency, Records: n, Handled: int(done.Load()),
		FirstNS: first.Load(), LastNS: last.Load(), Violations: violations.Load(),
	}
	if late != nil {
		sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
		res.P50NS, res.P99NS = late[n/2], late[min(n-1, n*99/100)]
	}
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	// A graceful stop, as the Parallel Consumer's closeDrainFirst.
	cancel()
	return <-errc
}

// moduleVersion is the version of module path built into this program.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(unknown)"
}
