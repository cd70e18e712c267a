// Package pcon is a parallel Kafka consumer built on sarama's consumer
// group. It runs a handler on many records of a partition at once while
// keeping per-key (or per-partition) order, and commits an offset only
// when every record below it has completed. It knows nothing of the
// application that uses it: the pipeline's product-consumers run on it,
// and any Go program can.
//
// Beyond what Confluent Parallel Consumer offers, it has key runs (a hot
// key's queued records handled together, in offset order, in one handler
// call: see Hot keys and bounds; Confluent's cannot batch one key's
// records, their issues #266 and #551), natural batching that adds no
// latency to an idle consumer, shared workers for fast handlers, per-key
// bounds with an overflow policy, and completed offsets above the
// committed one carried in the commit metadata, so that a new owner skips
// them.
//
// pcon is a Go module of its own (github.com/loopers/commerce-pipeline/pkg/pcon),
// versioned by the repository's tags pkg/pcon/vX.Y.Z, and requires sarama
// alone; its Prometheus collector, pconprom, is another module
// (pkg/pcon/pconprom/vX.Y.Z). The module's README says how to depend on it.
//
// # Usage
//
//	c, err := pcon.New(pcon.Config{
//		Brokers:        []string{"localhost:9092"},
//		Group:          "billing",
//		Topics:         []string{"orders"},
//		Ordering:       pcon.KeyOrder, // the default
//		MaxConcurrency: 500,           // handler calls at once; 2000 records held
//		Logger:         logger,
//	}, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
//		return apply(ctx, r.Key, r.Value)
//	}))
//	if err != nil {
//		return err // a *ConfigError names the bad field
//	}
//	prometheus.MustRegister(pconprom.NewCollector(c)) // module pkg/pcon/pconprom
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
// Keys are scoped to a partition.
//
// # Concurrency and buffering
//
// Two bounds apply across all partitions. Config.MaxConcurrency bounds the
// handler calls running at once: it is the concurrency cap, the number a
// handler that waits on I/O is sized by, and handler throughput is at most
// MaxConcurrency divided by the handler's time. Config.MaxInFlight bounds
// the records held, running, buffered behind them or waiting for a retry;
// it is the memory bound, enforced by pausing fetching (see Backpressure).
// They are separate because under KeyOrder a handler slot that frees up is
// filled only if a record of an idle key is already buffered: were the cap
// and the buffer one budget, fetching would pause as soon as records queue
// behind busy keys and resume only once running and buffered records
// together fell to 70 % of the cap, so the calls would dip below the cap
// on every pause, waiting for the next fetch. So MaxInFlight must not be below MaxConcurrency and
// defaults to four times it (at least 1000): between the pause at
// MaxInFlight and the resume at 70 % of it, about two to three records
// wait per running call, so with keys spread evenly a record of an idle key
// is nearly always at hand when a call ends, and fetching has the time a
// few handler calls take to refill the buffer. Setting only
// MaxInFlight keeps MaxConcurrency equal to it, one budget as before the
// two were told apart.
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
// A flooded key is therefore handled up to a hundred records (the default
// Batch.MaxRecords) per call, in one transaction if the handler makes it
// one, not one record per call. A key's next run starts after its previous
// one completed. When record i of a run fails, the key's later records of that
// batch are not complete either and run again after i; other keys are
// unaffected. A retried record runs in a batch of its own, so a poison
// record that fails its whole batch reaches the dead-letter topic alone.
//
// # Fast handlers
//
// A RecordHandler gets a goroutine per record while its calls wait on
// anything (a database, a remote call). Calls averaging under 5 µs run
// instead on at most GOMAXPROCS workers that take ready records in chunks,
// back to back, and report each chunk's completions at once; a watchdog
// hands on the records queued behind a call that blocks for 1 ms. A no-op
// handler so moves about two thirds of what a raw sarama consumer group
// does.
//
// # Offsets
//
// Each partition tracks which received records completed. The committed
// offset is the committable offset (PartitionStats.Committable): the lowest
// incomplete offset. Completed offsets above it are encoded into the
// commit metadata (run-length or bitset, whichever is shorter, dropping the
// oldest offsets if it would exceed 4000 bytes, within Kafka's default
// offset.metadata.max.bytes of 4096), so a new owner skips them instead of
// handling them again. Metadata pcon did not write is ignored with a log
// line. Commits happen every Config.CommitInterval and when a partition is
// revoked. sarama's auto-commit is disabled: pcon marks only the
// committable offset and commits it itself, so no offset is committed past
// an incomplete record.
//
// A broker whose offset.metadata.max.bytes is lower refuses longer metadata
// (OFFSET_METADATA_TOO_LARGE), commit and offset alike. pcon then reads the
// commit back and commits it again with its metadata halved, down to none,
// until the broker takes it, and keeps the size that landed as its limit
// from then on: the offset is committed, and a new owner handles again the
// completed records the shorter metadata leaves out. The first time, it
// logs a warning. The final commits of a session are read back whenever
// they carry metadata, since the broker's answer arrives after the session.
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
// A broker that stops answering (a frozen process, a hung machine) is
// noticed by probing it (package brokerwatch): once it has left a probe
// unanswered for Config.SilentBroker, the fetch, heartbeat or commit
// waiting on it is given up and new connections to it are refused until it
// answers again, so the Consumer follows its partitions and the group's
// coordinator to their new leaders as soon as Kafka has fenced it, instead
// of waiting out Sarama's Net.ReadTimeout (which a group needs longer than
// its rebalance timeout for JoinGroup).
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
// Config.OnAssigned and Config.OnRevoked report each assignment and
// release with its epoch and offsets (the pipeline records partition
// ownership with them). Config.InstanceID makes the Consumer a static
// member (KIP-345): restarted under the same id within the session
// timeout, it gets its partitions back without a rebalance of the others.
// Give each instance a stable, distinct id; an instance that stops for
// good leaves its partitions idle until its session times out.
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
// # Observability
//
// Consumer.Stats reports, per partition, the true lag (log end minus the
// committable offset, kept current while fetching is paused), the gap
// (completed records above the committable offset), the blocking offset
// and how long it has blocked, records in flight against capacity, active
// keys, the longest key queue and overflow counts by policy. Package
// pconprom exports them to Prometheus as pcon_* metrics. Pausing and
// resuming are logged with the load.
//
// pcon itself imports no tracing library. Package pcontrace traces a
// Consumer with OpenTelemetry from outside: it wraps the handler given to
// New (a span per call, linked to each record's creation context) and
// supplies Config.OnDeadLetter (a span per dead-letter publish) and
// Config.OnCommit (a span per offset commit).
//
// # Goroutines and concurrency
//
//   - New starts nothing. Run starts sarama's goroutines and pcon's own: one
//     per claimed partition (feeding records), one committer per group
//     session, one watching the brokers (and one per probe under way), handler goroutines (for a RecordHandler, workers started on
//     demand, at most MaxConcurrency, kept until shutdown, of which at most
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
