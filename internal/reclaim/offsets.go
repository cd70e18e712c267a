package reclaim

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// position returns the first offset to take (the committed one, or the
// oldest when none is) and the partition's high water mark.
func (r *Reclaimer) position(k tp) (next, hwm int64, err error) {
	if hwm, err = r.client.GetOffset(k.topic, k.partition, sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("high water mark of %s/%d: %w", k.topic, k.partition, err)
	}
	oldest, err := r.client.GetOffset(k.topic, k.partition, sarama.OffsetOldest)
	if err != nil {
		return 0, 0, fmt.Errorf("oldest offset of %s/%d: %w", k.topic, k.partition, err)
	}
	if next, err = r.committed(k); err != nil {
		return 0, 0, err
	}
	if next < oldest { // nothing committed yet, or retention removed it
		next = oldest
	}
	return next, hwm, nil
}

// committed fetches the group's committed offset of k, -1 when there is none.
// The reclaimer talks to the coordinator itself rather than through sarama's
// offset manager: it needs "no offset yet" for a group that never committed,
// and the commit's own error, which the offset manager only logs.
func (r *Reclaimer) committed(k tp) (int64, error) {
	b, err := r.client.Coordinator(r.cfg.Group)
	if err != nil {
		return 0, fmt.Errorf("coordinator of %s: %w", r.cfg.Group, err)
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: r.cfg.Group}
	req.AddPartition(k.topic, k.partition)
	resp, err := b.FetchOffset(req)
	if err != nil {
		_ = r.client.RefreshCoordinator(r.cfg.Group)
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, err)
	}
	if errors.Is(resp.Err, sarama.ErrGroupIDNotFound) {
		return -1, nil
	}
	if resp.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, resp.Err)
	}
	blk := resp.GetBlock(k.topic, k.partition)
	switch {
	case blk == nil, errors.Is(blk.Err, sarama.ErrGroupIDNotFound), errors.Is(blk.Err, sarama.ErrUnknownTopicOrPartition):
		return -1, nil
	case blk.Err != sarama.ErrNoError:
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, blk.Err)
	}
	return blk.Offset, nil
}

// commit stores offset as the group's position in k.
func (r *Reclaimer) commit(k tp, offset int64) error {
	b, err := r.client.Coordinator(r.cfg.Group)
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", r.cfg.Group, err)
	}
	req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: r.cfg.Group,
		ConsumerGroupGeneration: sarama.GroupGenerationUndefined, RetentionTime: -1}
	req.AddBlock(k.topic, k.partition, offset, 0, "")
	resp, err := b.CommitOffset(req)
	if err != nil {
		_ = r.client.RefreshCoordinator(r.cfg.Group)
		return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, err)
	}
	if kerr := resp.Errors[k.topic][k.partition]; kerr != sarama.ErrNoError {
		return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, kerr)
	}
	return nil
}
