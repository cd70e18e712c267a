package pcon

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/core"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

// groupHandler connects one sarama consumer-group session at a time to the
// control plane. sarama calls Setup, then ConsumeClaim on one goroutine per
// partition, then Cleanup once every ConsumeClaim has returned.
type groupHandler struct {
	c      *Consumer
	client sarama.Client

	// Per session; written in Setup, read by the claim goroutines sarama
	// starts after Setup returns.
	meta     map[engine.TP]string
	commitMu sync.Mutex // orders periodic commits with revoke commits; guards marked, final and reported
	// marked is the last commit marked of each partition, final the one
	// marked when it was revoked.
	marked map[engine.TP]core.Commit
	final  map[engine.TP]core.Commit
	// reported is the last commit of each partition told to
	// Config.OnCommit.
	reported   map[engine.TP]core.Commit
	stopCommit chan struct{}
	committer  sync.WaitGroup
}

func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	h.meta = h.fetchMetadata(sess.Claims())
	h.marked = make(map[engine.TP]core.Commit)
	h.final = make(map[engine.TP]core.Commit)
	h.reported = make(map[engine.TP]core.Commit)
	h.c.takeRefusals() // of an earlier session, whose commits it confirmed
	h.stopCommit = make(chan struct{})
	h.committer.Add(1)
	go h.commitLoop(sess)
	h.c.log.Info("pcon: partitions assigned", "group", h.c.cfg.Group, "member", sess.MemberID(),
		"generation", sess.GenerationID(), "claims", sess.Claims())
	return nil
}

func (h *groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	close(h.stopCommit)
	h.committer.Wait()
	h.commitMu.Lock()
	changed := h.changedLocked()
	h.commitMu.Unlock()
	h.commit(sess, changed)
	// The refusal of a final commit reaches the group's error channel only
	// after the session, whose commit it was, has ended: every final commit
	// that could be refused is confirmed.
	h.commitMu.Lock()
	h.confirm(sess, h.final)
	h.commitMu.Unlock()
	h.c.log.Info("pcon: partitions released", "group", h.c.cfg.Group, "generation", sess.GenerationID())
	return nil
}

// fetchMetadata reads the committed metadata of the claimed partitions,
// which sarama does not expose. Failing to read it only costs reprocessing.
func (h *groupHandler) fetchMetadata(claims map[string][]int32) map[engine.TP]string {
	out := make(map[engine.TP]string)
	committed, err := h.fetchCommitted(claims)
	if err != nil {
		h.c.log.Warn("pcon: cannot read commit metadata; completed records may run again", core.ErrKey, err)
		return out
	}
	for tp, cm := range committed {
		out[tp] = cm.Metadata
	}
	return out
}

// fetchCommitted reads the group's committed offsets and metadata of
// partitions from its coordinator. Partitions without a commit are absent.
func (h *groupHandler) fetchCommitted(partitions map[string][]int32) (map[engine.TP]core.Commit, error) {
	broker, err := h.client.Coordinator(h.c.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("find the group coordinator: %w", err)
	}
	resp, err := broker.FetchOffset(sarama.NewOffsetFetchRequest(h.c.cfg.Sarama.Version, h.c.cfg.Group, partitions))
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets: %w", err)
	}
	if resp.Err != sarama.ErrNoError {
		return nil, fmt.Errorf("fetch committed offsets: %w", resp.Err)
	}
	out := make(map[engine.TP]core.Commit)
	for topic, parts := range partitions {
		for _, p := range parts {
			if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
				tp := engine.TP{Topic: topic, Partition: p}
				out[tp] = core.Commit{TP: tp, Offset: b.Offset, Metadata: b.Metadata}
			}
		}
	}
	return out, nil
}

// confirm makes sure that commits, just made, landed if they carry
// metadata. A broker refuses metadata longer than its
// offset.metadata.max.bytes (OFFSET_METADATA_TOO_LARGE). So the commits
// are read back, and one that is not there is made again with its metadata
// halved, down to none at worst, until it is: the offset is committed, and
// as much of the metadata as the broker takes. Shorter metadata that lands
// brings the Consumer's limit down to its size. Called with commitMu held.
func (h *groupHandler) confirm(sess sarama.ConsumerGroupSession, commits map[engine.TP]core.Commit) {
	c := h.c
	pending := make(map[engine.TP]core.Commit)
	for tp, cm := range commits {
		if cm.Metadata != "" {
			pending[tp] = cm
		}
	}
	refused := make(map[engine.TP]int) // tp -> size of its first refused metadata
	for len(pending) > 0 {
		parts := make(map[string][]int32)
		for tp := range pending {
			parts[tp.Topic] = append(parts[tp.Topic], tp.Partition)
		}
		committed, err := h.fetchCommitted(parts)
		if err != nil {
			c.log.Warn("pcon: cannot confirm commits", "group", c.cfg.Group, core.ErrKey, err)
			return
		}
		for tp, cm := range pending {
			got, ok := committed[tp]
			switch {
			case ok && got.Offset == cm.Offset && got.Metadata == cm.Metadata:
				delete(pending, tp)
				if size, ok := refused[tp]; ok && c.core.LowerMetadataLimit(len(cm.Metadata)) {
					c.metadataLimitLowered(tp, size, len(cm.Metadata))
				}
				continue
			case cm.Metadata == "":
				c.log.Warn("pcon: commit not accepted, even without metadata",
					"group", c.cfg.Group, "topic", tp.Topic, "partition", tp.Partition, "offset", cm.Offset)
				delete(pending, tp)
				continue
			}
			if _, ok := refused[tp]; !ok {
				refused[tp] = len(cm.Metadata)
			}
			c.log.Debug("pcon: commit not found; committing it again with less metadata",
				"group", c.cfg.Group, "topic", tp.Topic, "partition", tp.Partition, "offset", cm.Offset, "metadataBytes", len(cm.Metadata))
			cm.Metadata = offsets.Reencode(cm.Metadata, offsets.ShorterLimit(len(cm.Metadata)))
			pending[tp] = cm
			h.marked[tp] = cm
			mark(sess, cm)
		}
		if len(pending) > 0 {
			h.commit(sess, h.changedLocked())
		}
	}
}

func (h *groupHandler) commitLoop(sess sarama.ConsumerGroupSession) {
	defer h.committer.Done()
	t := time.NewTicker(h.c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stopCommit:
			return
		case <-t.C:
			h.commitMu.Lock()
			for _, cm := range h.c.core.Commits() {
				mark(sess, cm)
				h.marked[cm.TP] = cm
			}
			changed := h.changedLocked()
			h.commitMu.Unlock()
			h.commit(sess, changed)
			if refused := h.c.takeRefusals(); len(refused) > 0 {
				// The answer does not say which commit it refused:
				// confirm the last ones. If they landed, the refused
				// one was earlier, and they replaced it.
				h.commitMu.Lock()
				last := make(map[engine.TP]core.Commit)
				for tp := range refused {
					if cm, ok := h.marked[tp]; ok {
						last[tp] = cm
					}
				}
				h.confirm(sess, last)
				h.commitMu.Unlock()
			}
			h.refreshLogEnds()
		}
	}
}

// changedLocked returns, for Config.OnCommit, the commits marked since
// the ones it was last told of, in topic and partition order, and notes
// them as told; nil without the hook. Called with commitMu held.
func (h *groupHandler) changedLocked() []PartitionEvent {
	if h.c.cfg.OnCommit == nil {
		return nil
	}
	var out []PartitionEvent
	for tp, cm := range h.marked {
		if prev, ok := h.reported[tp]; cm.Offset < 0 || ok && prev.Offset == cm.Offset && prev.Metadata == cm.Metadata {
			continue // not marked (mark skips it), or committed already
		}
		h.reported[tp] = cm
		out = append(out, PartitionEvent{Topic: tp.Topic, Partition: tp.Partition, Epoch: cm.Epoch, Offset: cm.Offset})
	}
	slices.SortFunc(out, func(a, b PartitionEvent) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// commit sends the coordinator what sess has marked, between the calls of
// Config.OnCommit when changed has offsets. sarama sends no request when
// nothing changed since its last commit.
func (h *groupHandler) commit(sess sarama.ConsumerGroupSession, changed []PartitionEvent) {
	if len(changed) == 0 {
		sess.Commit()
		return
	}
	done := h.c.cfg.OnCommit(h.c.cfg.Group, changed)
	sess.Commit()
	if done != nil {
		done(h.c.refusedAmong(changed))
	}
}

// refreshLogEnds asks the broker for the log end of partitions whose
// records are not being fetched (paused, or blocked on a full key queue):
// sarama learns it only from fetches, so true lag would freeze while the
// backlog grows.
func (h *groupHandler) refreshLogEnds() {
	for tp, epoch := range h.c.core.Stalled() {
		end, err := h.client.GetOffset(tp.Topic, tp.Partition, sarama.OffsetNewest)
		if err != nil {
			h.c.log.Debug("pcon: read log end offset", "topic", tp.Topic, "partition", tp.Partition, core.ErrKey, err)
			continue
		}
		h.c.core.SetLogEnd(tp, epoch, end)
	}
}

// startOffset resolves the claim's initial offset. Without a committed
// offset sarama hands over its OffsetOldest/OffsetNewest sentinel; the
// tracker needs the real offset, or its lag and commits would be computed
// from -2. If the broker cannot say, the sentinel stays: the tracker then
// starts at the first record received.
func (h *groupHandler) startOffset(topic string, partition int32, initial int64) int64 {
	if initial >= 0 {
		return initial
	}
	off, err := h.client.GetOffset(topic, partition, initial)
	if err != nil {
		h.c.log.Warn("pcon: resolve start offset", "topic", topic, "partition", partition, core.ErrKey, err)
		return initial
	}
	return off
}

// mark sets the session's offset and metadata for cm. MarkOffset only
// moves forward and ignores new metadata at the same offset; ResetOffset
// then stores the metadata. Offsets below the current mark never reach
// here because the committable offset only grows within an assignment.
func mark(sess sarama.ConsumerGroupSession, cm core.Commit) {
	if cm.Offset < 0 {
		return // nothing received yet on a partition without a committed offset
	}
	sess.MarkOffset(cm.TP.Topic, cm.TP.Partition, cm.Offset, cm.Metadata)
	sess.ResetOffset(cm.TP.Topic, cm.TP.Partition, cm.Offset, cm.Metadata)
}

// fetchBatch bounds how many buffered messages are handed to the control
// plane under one lock acquisition.
const fetchBatch = 256

func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	c := h.c
	tp := engine.TP{Topic: claim.Topic(), Partition: claim.Partition()}
	start := h.startOffset(tp.Topic, tp.Partition, claim.InitialOffset())
	epoch := c.core.Assign(tp, start, h.meta[tp])
	if c.cfg.OnAssigned != nil {
		c.cfg.OnAssigned(c.cfg.Group, []PartitionEvent{{Topic: tp.Topic, Partition: tp.Partition, Epoch: epoch, Offset: start}})
	}
	batch := make([]*sarama.ConsumerMessage, 0, fetchBatch)
	var scratch Record // for the key resolver
	items := make([]core.Item, 0, fetchBatch)
	msgs := claim.Messages()
	ctx := sess.Context()
	var now time.Time
	for open := true; open; {
		if resumed := c.pause.wait(); resumed != nil {
			select {
			case <-resumed:
			case <-ctx.Done():
				open = false
				continue
			}
		}
		select {
		case <-ctx.Done():
			open = false
			continue
		case m, ok := <-msgs:
			if !ok {
				open = false
				continue
			}
			// One clock read per fetched run: the run arrived together.
			now = time.Now()
			batch = append(batch[:0], m)
		}
	drain:
		for len(batch) < fetchBatch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break drain
				}
				batch = append(batch, m)
			default:
				break drain
			}
		}
		items = c.items(items[:0], batch, &scratch, now)
		clear(batch)
		open = c.feed(ctx, tp, epoch, items, claim.HighWaterMarkOffset())
		clear(items)
	}
	cm, ok := c.core.Revoke(tp, epoch, c.cfg.RevokeGrace)
	if ok {
		h.commitMu.Lock()
		mark(sess, cm)
		h.marked[tp], h.final[tp] = cm, cm
		h.commitMu.Unlock()
		if c.cfg.OnRevoked != nil {
			c.cfg.OnRevoked(c.cfg.Group, []PartitionEvent{{
				Topic: tp.Topic, Partition: tp.Partition, Epoch: epoch, Offset: cm.Offset, Completed: cm.Completed,
			}})
		}
	}
	return nil
}

// feed hands items to the control plane, waiting whenever a full key queue
// blocks the partition. It reports false if ctx ended while waiting.
func (c *Consumer) feed(ctx context.Context, tp engine.TP, epoch uint64, items []core.Item, logEnd int64) bool {
	for len(items) > 0 {
		n, wait := c.core.Add(tp, epoch, items, logEnd)
		items = items[n:]
		if wait == nil {
			return true
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// fetchedSlab bounds how many fetched records share one allocation: most of
// a per-record allocation saved, while a record still queued (behind its
// key, say) keeps only a few slab-mates' memory.
const fetchedSlab = 32

// items appends to dst the control plane's items for msgs, received at
// received. A resolver other than the default reads each record through
// scratch.
func (c *Consumer) items(dst []core.Item, msgs []*sarama.ConsumerMessage, scratch *Record, received time.Time) []core.Item {
	var slab []fetched
	for i, m := range msgs {
		if len(slab) == 0 {
			slab = make([]fetched, min(fetchedSlab, len(msgs)-i))
		}
		f := &slab[0]
		slab = slab[1:]
		f.msg, f.received = m, received
		it := core.Item{Offset: m.Offset, Size: len(m.Key) + len(m.Value), Payload: f}
		if c.rawKey {
			it.RawKey = m.Key // nil for a record without a key: no key, as Key ""
		} else {
			fill(scratch, f, scratch.Headers[:0])
			it.Key = c.cfg.KeyResolver(scratch)
		}
		dst = append(dst, it)
	}
	return dst
}
