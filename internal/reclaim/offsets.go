package reclaim

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon/brokerwatch"
)

// coordinatorWait bounds how long an offset request waits for the group's
// coordinator to be ready. A cluster's first group request creates
// __consumer_offsets, and until its partitions are loaded the coordinator
// answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS; a coordinator
// that moved answers NOT_COORDINATOR until the client looks it up again.
// Either passes in moments, and a pass that gave up at once would report
// an error for nothing (a fresh cluster's first pass, pipelinectl's first
// call). A frozen coordinator is fenced after Kafka's 9 s broker session
// and its groups move within moments: the wait covers that too.
const coordinatorWait = 15 * time.Second

// coordinatorBusy reports whether err is the coordinator's "not ready
// here" answer, which looking it up again and retrying heals; or the
// coordinator found silent (brokerwatch gave up the request or refused the
// connection), which heals once Kafka fences it and moves the group's
// coordinator to a live broker.
func coordinatorBusy(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) || errors.Is(err, sarama.ErrOffsetsLoadInProgress) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) ||
		errors.Is(err, brokerwatch.ErrSilent) || errors.Is(err, net.ErrClosed)
}

// coordinated runs req against the group's coordinator, looking the
// coordinator up again after any failure and retrying while it is not
// ready, up to coordinatorWait.
func (r *Reclaimer) coordinated(req func(*sarama.Broker) error) error {
	deadline := time.Now().Add(coordinatorWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		b, err := r.client.Coordinator(r.cfg.Group)
		if err != nil {
			err = fmt.Errorf("coordinator of %s: %w", r.cfg.Group, err)
		} else if err = req(b); err == nil {
			return nil
		}
		_ = r.client.RefreshCoordinator(r.cfg.Group)
		if !coordinatorBusy(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}

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
//
// The fetch requires stable offsets (OffsetFetch v7). Without that flag
// Kafka's group coordinator answers from what its offsets partition has
// committed (its high water mark), and a coordinator that has just taken
// the group over from a failed broker may not have seen its followers
// confirm the last commits yet: it answers an older offset, or none, with
// no error, and the pass would re-drive records already re-driven. With it
// the coordinator answers from everything it holds, once that is
// committed.
func (r *Reclaimer) committed(k tp) (int64, error) {
	offset := int64(-1)
	err := r.coordinated(func(b *sarama.Broker) error {
		req := &sarama.OffsetFetchRequest{Version: 7, ConsumerGroup: r.cfg.Group, RequireStable: true}
		req.AddPartition(k.topic, k.partition)
		resp, err := b.FetchOffset(req)
		if err != nil {
			return fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, err)
		}
		if errors.Is(resp.Err, sarama.ErrGroupIDNotFound) {
			return nil
		}
		if resp.Err != sarama.ErrNoError {
			return fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, resp.Err)
		}
		blk := resp.GetBlock(k.topic, k.partition)
		switch {
		case blk == nil, errors.Is(blk.Err, sarama.ErrGroupIDNotFound), errors.Is(blk.Err, sarama.ErrUnknownTopicOrPartition):
			return nil
		case blk.Err != sarama.ErrNoError:
			return fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, blk.Err)
		}
		offset = blk.Offset
		return nil
	})
	if err != nil {
		return 0, err
	}
	return offset, nil
}

// commit stores offset as the group's position in k.
func (r *Reclaimer) commit(k tp, offset int64) error {
	return r.coordinated(func(b *sarama.Broker) error {
		req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: r.cfg.Group,
			ConsumerGroupGeneration: sarama.GroupGenerationUndefined, RetentionTime: -1}
		req.AddBlock(k.topic, k.partition, offset, 0, "")
		resp, err := b.CommitOffset(req)
		if err != nil {
			return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, err)
		}
		if kerr := resp.Errors[k.topic][k.partition]; kerr != sarama.ErrNoError {
			return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, kerr)
		}
		return nil
	})
}
