package pconprom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pconprom"
)

type fixed pcon.Stats

func (f fixed) Stats() pcon.Stats { return pcon.Stats(f) }

func TestCollector(t *testing.T) {
	t.Parallel()
	src := fixed{
		Group: "g", InFlight: 7, Capacity: 100,
		Partitions: []pcon.PartitionStats{
			{Topic: "t", Partition: 0, Assigned: true, Paused: true, Committable: 10, LogEnd: 25, TrueLag: 15,
				GapSize: 4, Blocking: 10, BlockedFor: 2 * time.Second, Processed: 9, Retried: 2, DeadLettered: 1,
				DLTFailures: 3, StaleDropped: 5, Skipped: 6, ActiveKeys: 12, LongestKey: 40, BlockedOnKey: true,
				KeyBlocks: 2, Dropped: 3, Overflowed: 4},
			{Topic: "t", Partition: 1, Blocking: -1, Processed: 1},
		},
		Latency: []pcon.LatencyStats{{Topic: "t", Bounds: []float64{0.1, 1}, Buckets: []uint64{3, 4}, Count: 5, Sum: 2.5}},
	}
	want := `
# HELP pcon_blocked_seconds How long the blocking offset has held the committable offset back.
# TYPE pcon_blocked_seconds gauge
pcon_blocked_seconds{group="g",partition="0",topic="t"} 2
# HELP pcon_dlt_publish_failures_total Failed dead-letter publishes; the record stays uncommitted.
# TYPE pcon_dlt_publish_failures_total counter
pcon_dlt_publish_failures_total{group="g",partition="0",topic="t"} 3
pcon_dlt_publish_failures_total{group="g",partition="1",topic="t"} 0
# HELP pcon_handler_duration_seconds Handler latency.
# TYPE pcon_handler_duration_seconds histogram
pcon_handler_duration_seconds_bucket{group="g",topic="t",le="0.1"} 3
pcon_handler_duration_seconds_bucket{group="g",topic="t",le="1"} 4
pcon_handler_duration_seconds_bucket{group="g",topic="t",le="+Inf"} 5
pcon_handler_duration_seconds_sum{group="g",topic="t"} 2.5
pcon_handler_duration_seconds_count{group="g",topic="t"} 5
# HELP pcon_true_lag Records not complete yet: log end offset minus the committable offset.
# TYPE pcon_true_lag gauge
pcon_true_lag{group="g",partition="0",topic="t"} 15
# HELP pcon_paused 1 when fetching the partition is paused by backpressure.
# TYPE pcon_paused gauge
pcon_paused{group="g",partition="0",topic="t"} 1
# HELP pcon_active_keys Keys with records running, waiting for a retry, or queued.
# TYPE pcon_active_keys gauge
pcon_active_keys{group="g",partition="0",topic="t"} 12
# HELP pcon_longest_key_queue Records queued behind the busiest key of the partition.
# TYPE pcon_longest_key_queue gauge
pcon_longest_key_queue{group="g",partition="0",topic="t"} 40
# HELP pcon_key_blocked 1 when fetching the partition waits for a full key queue to drain.
# TYPE pcon_key_blocked gauge
pcon_key_blocked{group="g",partition="0",topic="t"} 1
# HELP pcon_key_overflow_total Records that found their key's queue full, by policy: block (fetching stopped), drop-oldest (a queued record dropped), dead-letter.
# TYPE pcon_key_overflow_total counter
pcon_key_overflow_total{group="g",partition="0",policy="block",topic="t"} 2
pcon_key_overflow_total{group="g",partition="0",policy="dead-letter",topic="t"} 4
pcon_key_overflow_total{group="g",partition="0",policy="drop-oldest",topic="t"} 3
pcon_key_overflow_total{group="g",partition="1",policy="block",topic="t"} 0
pcon_key_overflow_total{group="g",partition="1",policy="dead-letter",topic="t"} 0
pcon_key_overflow_total{group="g",partition="1",policy="drop-oldest",topic="t"} 0
# HELP pcon_in_flight Records being handled, retried or dead-lettered.
# TYPE pcon_in_flight gauge
pcon_in_flight{group="g"} 7
`
	err := testutil.CollectAndCompare(pconprom.NewCollector(src), strings.NewReader(want),
		"pcon_blocked_seconds", "pcon_dlt_publish_failures_total", "pcon_handler_duration_seconds",
		"pcon_true_lag", "pcon_paused", "pcon_in_flight", "pcon_active_keys", "pcon_longest_key_queue",
		"pcon_key_blocked", "pcon_key_overflow_total")
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(pconprom.NewCollector(src)); n != 2+9*2+10+1 {
		t.Errorf("metrics collected = %d", n)
	}
	if problems, err := testutil.CollectAndLint(pconprom.NewCollector(src)); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
