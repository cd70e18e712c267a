package reclaim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// maxErrorKey bounds an error text used as a summary key: errors that differ
// only in their tail (ids, offsets) are counted together.
const maxErrorKey = 80

// PartitionSummary describes one DLT partition for operators.
type PartitionSummary struct {
	Topic     string `json:"topic"` // the DLT topic
	Partition int32  `json:"partition"`
	Records   int64  `json:"records"` // in the log
	// Pending records lie after the reclaimer's committed offset: not yet
	// re-driven, parked or skipped.
	Pending int64 `json:"pending"`
	// OldestPending is the age of the oldest pending record (0: none).
	OldestPending time.Duration `json:"oldestPendingNs"`
	// Redrives counts records by how often they were re-driven before.
	Redrives map[int]int64 `json:"redrives"`
	// AtMax counts records re-driven MaxRedrives times: parked for good.
	AtMax   int64 `json:"atMaxRedrives"`
	Foreign int64 `json:"foreign"` // records without pcon origin headers
	// Expired counts the pending records whose event is older than their
	// consumers' idempotency horizon: re-driven, they would be skipped, so
	// a pass parks them as expired instead.
	Expired int64 `json:"expired"`
	// Errors counts records by their pcon-error header (cut to 80 bytes).
	Errors map[string]int64 `json:"errors"`
}

// List summarises the DLT partitions of topics (nil: all configured), in
// topic and partition order. It reads every record in them.
func (r *Reclaimer) List(ctx context.Context, topics []string) ([]PartitionSummary, error) {
	if topics == nil {
		topics = r.cfg.Topics
	}
	var out []PartitionSummary
	for _, topic := range topics {
		dlt := topic + r.cfg.DLTSuffix
		parts, err := r.client.Partitions(dlt)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", dlt, err)
		}
		slices.Sort(parts)
		for _, p := range parts {
			s, err := r.summarise(ctx, tp{dlt, p})
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func (r *Reclaimer) summarise(ctx context.Context, k tp) (PartitionSummary, error) {
	s := PartitionSummary{Topic: k.topic, Partition: k.partition, Redrives: map[int]int64{}, Errors: map[string]int64{}}
	committed, hwm, err := r.position(k)
	if err != nil {
		return s, err
	}
	oldest, err := r.client.GetOffset(k.topic, k.partition, sarama.OffsetOldest)
	if err != nil {
		return s, fmt.Errorf("oldest offset of %s/%d: %w", k.topic, k.partition, err)
	}
	s.Records, s.Pending = hwm-oldest, hwm-committed
	if oldest >= hwm {
		return s, nil
	}
	now := time.Now()
	err = r.read(ctx, k, oldest, hwm, func(m *sarama.ConsumerMessage) (bool, error) {
		info := Inspect(m)
		if info.Origin == "" {
			s.Foreign++
		}
		s.Redrives[info.Redrives]++
		if info.Redrives >= r.cfg.MaxRedrives {
			s.AtMax++
		}
		if info.Error != "" {
			e := info.Error
			if len(e) > maxErrorKey {
				e = e[:maxErrorKey]
			}
			s.Errors[e]++
		}
		if m.Offset >= committed && s.OldestPending == 0 {
			s.OldestPending = now.Sub(info.DeadSince)
		}
		if m.Offset >= committed && r.expired(info.Origin, info) {
			s.Expired++
		}
		return true, nil
	})
	return s, err
}
