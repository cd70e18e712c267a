// Package pcon is a parallel Kafka consumer built on sarama's consumer
// group. It runs a handler on many records of a partition at once while
// keeping per-key (or per-partition) order, and commits an offset only
// when every record below it has completed.
//
// # Usage
//
//	c, err := pcon.New(pcon.Config{
//		Brokers:     []string{"localhost:9092"},
//		Group:       "billing",
//		Topics:      []string{"orders"},
//		Ordering:    pcon.KeyOrder, // the default
//		MaxInFlight: 2000,
//		Logger:      logger,
//	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
//		return apply(ctx, r.Key, r.Value)
//	}))
//	if err != nil {
//		return err // a *ConfigError names the bad field
//	}
//	prometheus.MustRegister(pconprom.NewCollector(c))
//	go func() { <-shutdown; c.Close() }()
//	return c.Run(ctx)
//
// Passing a BatchHandler instead selects the micro-batch engine:
//
//	pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
//		failed := map[int]error{}
//		// ... one transaction for the batch; record failures by index ...
//		if len(failed) > 0 {
//			return &pcon.BatchError{Failed: failed}
//		}
//		return nil
//	})
//
// # Ordering
//
// KeyOrder runs one record per key at a time and different keys in
// parallel; Config.KeyResolver picks the key (the record key by default,
// HeaderKey for a header, or any function). Records with an empty key run
// unordered unless Config.OrderEmptyKeys is set. PartitionOrder runs one
// record per partition at a time; Unordered runs records as capacity allows.
// Keys are scoped to a partition. Config.MaxInFlight bounds the records
// being handled across all partitions.
//
// # Hot keys and bounds
//
// With a BatchHandler a key's queued records run as one run in a batch, so
// a flooded key moves Batch.MaxRecords records per handler call. Batches
// start as soon as a slot is free (Batch.MaxWait is only an optional
// linger), so batching costs an idle consumer no latency and batches grow
// with the load. Config.KeyQueueCapacity bounds the records one key may
// hold queued (default a quarter of MaxInFlight, so no key takes the whole
// budget); past it Config.KeyOverflow applies: Block stops fetching that
// key's partition until the key drains while other partitions go on,
// DropOldest completes the key's oldest queued record without running it,
// DeadLetter sends the arriving record to the dead-letter topic.
// PartitionStats reports active keys, the longest key queue and overflow
// counts. Config.HandlerTimeout gives each handler call a deadline.
//
// # Offsets
//
// Each partition tracks which received records completed. The committed
// offset is the committable offset (PartitionStats.Committable): the lowest
// incomplete offset. Completed offsets above it are encoded into the commit metadata (run-length or
// bitset, whichever is shorter, dropping the oldest offsets if it would
// exceed 4000 bytes), so a new owner skips them instead of handling them
// again. Metadata pcon did not write is ignored with a log line. Commits
// happen every Config.CommitInterval and when a partition is revoked.
// sarama's auto-commit is disabled: pcon marks only the committable offset
// and commits it itself, so no offset is committed past an incomplete record.
//
// # Failures
//
// A handler error or panic fails the record. It is retried after
// Config.Backoff (growing by Config.BackoffMultiplier) while only its key
// (its partition in PartitionOrder) waits; other keys keep flowing. After
// Config.MaxAttempts attempts, or at once for an error wrapped with
// Permanent, the record is published to its topic plus Config.DLTSuffix
// with its key, value and headers, and the Header* headers of this
// package; then it counts as complete. If that publish fails the record
// stays incomplete, its offset is never committed, and the publish is
// retried and counted in PartitionStats.DLTFailures.
//
// Delivery is at least once: a record may be handled again after a
// rebalance or a crash (never if the previous owner's commit metadata says
// it completed). Handlers should be idempotent.
//
// # Rebalances
//
// Every assignment of a partition gets a new epoch. On revoke pcon stops
// dispatching the partition's records, waits up to Config.RevokeGrace for
// those in flight, commits, and lets go. Completions arriving later belong
// to an old epoch and are discarded, and if the partition comes back to the
// same Consumer its records wait until the old epoch's handlers have
// returned, so one Consumer never runs two records of a key at once.
//
// # Backpressure and memory
//
// When records in flight plus records buffered reach Config.MaxInFlight,
// fetching pauses; it resumes when they fall to 70 % of it. Pausing stops
// the partition feeders from taking records off sarama, whose bounded
// buffers then hold back further fetches (sarama's Pause API is not used:
// with every partition paused sarama sleeps 100 ms before it sees a
// resume). Memory is therefore bounded by MaxInFlight records plus sarama's
// buffers: Consumer.Fetch.Default bytes per partition, decoded, and
// ChannelBufferSize messages per partition. With compressed batches of
// small records a 1 MiB fetch decodes into ~100k messages, so lower
// Fetch.Default when memory matters.
//
// # Goroutines and concurrency
//
//   - New starts nothing. Run starts sarama's goroutines and pcon's own: one
//     per claimed partition (feeding records), one committer per group
//     session, handler goroutines (for a RecordHandler, workers started on
//     demand, at most MaxInFlight, kept until shutdown, of which at most
//     GOMAXPROCS run records while handler calls are fast, with a timer
//     watching for a call that blocks; for a BatchHandler, at most
//     Batch.Concurrency, each taking batches while there are any), and one
//     per record being dead-lettered. All have exited when Run returns.
//   - Config.OnAssigned and OnRevoked run on the partition's own goroutine,
//     outside pcon's locks, concurrently for different partitions.
//   - Handlers run concurrently with each other: the same handler value is
//     called from many goroutines. Two handler calls never hold records of
//     one key (KeyOrder) or one partition (PartitionOrder) at the same time
//     in one Consumer, and a key's records run in offset order.
//   - A handler's context is cancelled when the Consumer shuts down and
//     handlers are still running a further RevokeGrace after the
//     partitions were released. It is not cancelled on revoke; a handler
//     still running after its partition's grace becomes stale.
//   - Run may be called once. Close may be called any number of times from
//     any goroutine; it stops Run and waits for it (see Close for the
//     bound). Stats may be called at any time.
package pcon
