package app

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestPartitionEvents: every field the registry records of an assignment
// or a release comes over from pcon's hook event.
func TestPartitionEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []pcon.PartitionEvent
		want []cluster.PartitionEvent
	}{
		{"none", nil, []cluster.PartitionEvent{}},
		{"assigned", []pcon.PartitionEvent{{Topic: "like-events", Partition: 3, Epoch: 2, Offset: 41}},
			[]cluster.PartitionEvent{{Topic: "like-events", Partition: 3, Epoch: 2, Offset: 41}}},
		{"revoked", []pcon.PartitionEvent{{Topic: "a", Partition: 0, Epoch: 7, Offset: 90, Completed: 12}, {Topic: "b", Partition: 1, Epoch: 1, Offset: 5, Completed: 5}},
			[]cluster.PartitionEvent{{Topic: "a", Partition: 0, Epoch: 7, Offset: 90, Completed: 12}, {Topic: "b", Partition: 1, Epoch: 1, Offset: 5, Completed: 5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, partitionEvents(tc.in)); diff != "" {
				t.Errorf("partitionEvents (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProgressOf: the heartbeat publishes each partition pcon's stats list,
// owned or not, with its lag, gap, blocking offset and counters, read anew
// at each call.
func TestProgressOf(t *testing.T) {
	t.Parallel()
	stats := pcon.Stats{Group: "g", InFlight: 4, Partitions: []pcon.PartitionStats{
		{Topic: "t", Partition: 0, Assigned: true, Committable: 10, LogEnd: 17, TrueLag: 7, GapSize: 2, Blocking: 10, InFlight: 4, Processed: 30, Retried: 1, DeadLettered: 2},
		{Topic: "t", Partition: 1, Blocking: -1, Processed: 5},
	}}
	progress := progressOf(func() pcon.Stats { return stats })
	want := []cluster.PartitionProgress{
		{Topic: "t", Partition: 0, Assigned: true, TrueLag: 7, GapSize: 2, Blocking: 10, Processed: 30, DeadLettered: 2},
		{Topic: "t", Partition: 1, Blocking: -1, Processed: 5},
	}
	if diff := cmp.Diff(want, progress()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	stats.Partitions = stats.Partitions[1:]
	if diff := cmp.Diff(want[1:], progress()); diff != "" {
		t.Errorf("progress after a change of the stats (-want +got):\n%s", diff)
	}
}
