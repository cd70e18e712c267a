package app

import (
	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// The cluster registry takes its own types, not pcon's, so that the
// services that only read it (commerce-api) link no Kafka client. These
// copy pcon's hook events and stats into them.

// assignedTo is pcon's Config.OnAssigned for member.
func assignedTo(member *cluster.Member) func(group string, ps []pcon.PartitionEvent) {
	return func(group string, ps []pcon.PartitionEvent) { member.OnAssigned(group, partitionEvents(ps)) }
}

// revokedFrom is pcon's Config.OnRevoked for member.
func revokedFrom(member *cluster.Member) func(group string, ps []pcon.PartitionEvent) {
	return func(group string, ps []pcon.PartitionEvent) { member.OnRevoked(group, partitionEvents(ps)) }
}

// partitionEvents copies pcon's hook events into the registry's.
func partitionEvents(ps []pcon.PartitionEvent) []cluster.PartitionEvent {
	out := make([]cluster.PartitionEvent, len(ps))
	for i, p := range ps {
		out[i] = cluster.PartitionEvent{Topic: p.Topic, Partition: p.Partition, Epoch: p.Epoch, Offset: p.Offset, Completed: p.Completed}
	}
	return out
}

// progressOf is what Member.WatchStats reads of a consumer: the partitions
// in its stats (pcon's Consumer.Stats).
func progressOf(stats func() pcon.Stats) func() []cluster.PartitionProgress {
	return func() []cluster.PartitionProgress {
		ps := stats().Partitions
		out := make([]cluster.PartitionProgress, len(ps))
		for i, p := range ps {
			out[i] = cluster.PartitionProgress{
				Topic: p.Topic, Partition: p.Partition, Assigned: p.Assigned,
				TrueLag: p.TrueLag, GapSize: p.GapSize, Blocking: p.Blocking,
				Processed: p.Processed, DeadLettered: p.DeadLettered,
			}
		}
		return out
	}
}
