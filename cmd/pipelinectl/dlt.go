package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/internal/pg"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

func dltCommand() *command {
	return &command{name: "dlt", summary: "dead-letter topics: list, redrive", sub: []*command{
		{name: "list", summary: "per DLT partition: records, pending, oldest age, re-drive counts, errors", flags: listCmd(dltSource)},
		{name: "redrive", summary: "republish DLT records to their original partition", flags: redriveCmd(dltSource)},
	}}
}

func parkedCommand() *command {
	return &command{name: "parked", summary: "parked dead letters (kept 90 days): list, redrive", sub: []*command{
		{name: "list", summary: "per parked partition: records, pending, oldest age, re-drive counts, errors", flags: listCmd(parkedSource)},
		{name: "redrive", summary: "republish parked records to their original partition", flags: redriveCmd(parkedSource)},
	}}
}

// A source is what re-drives read: the dead-letter topics (the scheduled
// reclaimer's, parking what they will not re-drive) or the parked topics
// (an operator's last resort: everything goes back, whatever its count or
// reason).
type source struct {
	suffix, park, group string
	parked              bool
}

var (
	dltSource    = source{suffix: events.DLTSuffix, park: events.ParkedSuffix, group: reclaim.Group}
	parkedSource = source{suffix: events.ParkedSuffix, group: reclaim.ParkedGroup, parked: true}
)

// maxLimit bounds the records one call takes, over every partition: it
// republishes them reclaim.Chunk at a time, committing after each chunk.
const maxLimit = reclaim.MaxTotal

// topicsFlag resolves --topic (a topic such as like-events, or its domain,
// like) against the event topics; empty means all.
func topicsFlag(v string) ([]string, error) {
	all := events.NewRegistry().Topics()
	if v == "" {
		return all, nil
	}
	for _, t := range all {
		if v == t || v == events.DomainOf(t) {
			return []string{t}, nil
		}
	}
	return nil, usagef("--topic: unknown topic %q; one of: %s", v, strings.Join(all, ", "))
}

// reclaimer connects to Kafka as the services do (KAFKA_*) for topics (the
// pipeline's names; the reclaimer works on their names on the cluster);
// lock, when set, excludes the scheduled reclaimers (and other pipelinectl
// runs) from each partition this one takes.
func (e env) reclaimer(ctx context.Context, src source, topics []string, minIdle, horizon time.Duration, count, maxRedrives int, lock reclaim.Locker) (*reclaim.Reclaimer, error) {
	k, err := e.kafka()
	if err != nil {
		return nil, err
	}
	// A wrong password or CA fails here, naming the variable, instead of
	// as a timeout deep in a pass.
	if err := k.Check(ctx); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if src.parked {
		maxRedrives = math.MaxInt // a parked record goes back whatever its count
	}
	return reclaim.New(reclaim.Config{
		Kafka: k, ClientID: "pipelinectl",
		Topics: k.Topics(topics), DLTSuffix: src.suffix, ParkSuffix: src.park, Group: k.Group(src.group),
		MinIdle: minIdle, Count: count, MaxRedrives: maxRedrives, Logger: e.logger(), Lock: lock,
		Horizon: horizon, HorizonTopics: k.Topics(reclaim.HorizonTopics),
	})
}

// kafka reads the Kafka settings the services read; a missing or malformed
// one is a usage error naming it.
func (e env) kafka() (kafka.Settings, error) {
	l := config.New(e.lookup)
	k := kafka.Load(l)
	if err := l.Err(); err != nil {
		return kafka.Settings{}, usageError{msg: err.Error()}
	}
	return k, nil
}

// reclaimLocks opens the database the re-drivers lock DLT partitions in.
func (e env) reclaimLocks(ctx context.Context) (*pg.DB, error) {
	url, err := e.setting(func(l *config.Loader) string { return l.URL("DATABASE_URL", "postgres", "postgresql") })
	if err != nil {
		return nil, err
	}
	return pg.Open(ctx, url, pg.Options{MaxConns: len(events.NewRegistry().Topics()) + 1})
}

func listCmd(src source) func(fs *flag.FlagSet) func(context.Context, env, output, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, env, output, []string) error { return list(fs, src) }
}

func list(fs *flag.FlagSet, src source) func(context.Context, env, output, []string) error {
	topic := fs.String("topic", "", "only this topic (or domain); default all")
	maxRedrives := fs.Int("max-redrives", 3, "re-drives after which a record counts as parked for good")
	horizon := horizonFlag(fs)
	return func(ctx context.Context, e env, out output, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *maxRedrives < 1 {
			return usagef("--max-redrives must be positive, got %d", *maxRedrives)
		}
		if *horizon <= 0 {
			return usagef("--horizon must be positive, got %s", *horizon)
		}
		topics, err := topicsFlag(*topic)
		if err != nil {
			return err
		}
		r, err := e.reclaimer(ctx, src, topics, 0, *horizon, 1, *maxRedrives, nil) // reads only
		if err != nil {
			return err
		}
		defer r.Close()
		list, err := r.List(ctx, nil) // the reclaimer's topics
		if err != nil {
			return err
		}
		return out.print(list, []string{"TOPIC", "PART", "RECORDS", "PENDING", "OLDEST PENDING", "EXPIRED", "REDRIVES", "AT MAX", "FOREIGN", "TOP ERROR"}, func(row func(...any)) {
			for _, p := range list {
				row(p.Topic, p.Partition, p.Records, p.Pending, age(p.OldestPending), p.Expired, redrives(p.Redrives), p.AtMax, p.Foreign, topError(p.Errors))
			}
		})
	}
}

func redriveCmd(src source) func(fs *flag.FlagSet) func(context.Context, env, output, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, env, output, []string) error { return redrive(fs, src) }
}

func redrive(fs *flag.FlagSet, src source) func(context.Context, env, output, []string) error {
	topic := fs.String("topic", "", "the topic (or domain) whose records to re-drive (required)")
	olderThan := fs.Duration("older-than", 0, "only records dead-lettered at least this long ago")
	limit := fs.Int("limit", 100, fmt.Sprintf("most records taken in this call, over every partition (1 to %d; republished and committed %d at a time)", maxLimit, reclaim.Chunk))
	maxRedrives := fs.Int("max-redrives", 3, "records re-driven this often already stay parked")
	dryRun := fs.Bool("dry-run", false, "show what would be re-driven; republish and commit nothing")
	force := fs.Bool("force", false, "re-drive records dead-lettered for a permanent reason too (once the cause is fixed)")
	horizon := horizonFlag(fs)
	chosen := recordsFlag{}
	fs.Var(chosen, "record", "re-drive only this record, PARTITION:OFFSET as the dry run shows them (repeat, or comma-separate); commits nothing")
	return func(ctx context.Context, e env, out output, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		switch {
		case *topic == "":
			return usagef("--topic is required")
		case *olderThan < 0:
			return usagef("--older-than must not be negative, got %s", *olderThan)
		case *limit < 1 || *limit > maxLimit:
			return usagef("--limit must be 1 to %d, got %d", maxLimit, *limit)
		case *maxRedrives < 1:
			return usagef("--max-redrives must be positive, got %d", *maxRedrives)
		case *horizon <= 0:
			return usagef("--horizon must be positive, got %s", *horizon)
		case len(chosen) > maxLimit:
			return usagef("--record: at most %d records, got %d", maxLimit, len(chosen))
		}
		topics, err := topicsFlag(*topic)
		if err != nil {
			return err
		}
		locks, err := e.reclaimLocks(ctx)
		if err != nil {
			return err
		}
		defer locks.Close()
		r, err := e.reclaimer(ctx, src, topics, *olderThan, *horizon, *limit, *maxRedrives, reclaim.PGLock(locks))
		if err != nil {
			return err
		}
		defer r.Close()
		o := reclaim.Options{DryRun: *dryRun, Force: *force || src.parked, Total: *limit}
		if len(chosen) > 0 {
			o.Only = chosen
		}
		res := r.Pass(ctx, o)
		if *dryRun {
			err = printDryRun(out, res)
		} else {
			err = printPass(out, res)
		}
		if err != nil {
			return err
		}
		if perr := res.Err(); perr != nil {
			if res.Totals()[reclaim.Redriven] > 0 {
				return fmt.Errorf("%w: %w", errPartial, perr)
			}
			return perr
		}
		return nil
	}
}

func printPass(out output, res reclaim.Result) error {
	return out.print(res, []string{"TOPIC", "PART", "FROM", "COMMITTED", "REDRIVEN", "PARKED", "EXPIRED", "SKIPPED", "FAILED", "ERROR"}, func(row func(...any)) {
		for _, d := range res.Domains {
			if d.Err != nil {
				row(d.Topic+events.DLTSuffix, "-", "-", "-", 0, 0, 0, 0, 0, d.Err)
			}
			for _, p := range d.Partitions {
				c := p.Counts
				note := dash(p.ErrText)
				if p.Busy {
					note = "left: another re-driver holds this partition; run again"
				}
				row(p.Topic, p.Partition, p.From, p.Committed, c[reclaim.Redriven], c[reclaim.Parked], c[reclaim.Expired], c[reclaim.Skipped], c[reclaim.Failed], note)
			}
		}
	})
}

func printDryRun(out output, res reclaim.Result) error {
	return out.print(res, []string{"TOPIC", "PART", "OFFSET", "KEY", "WOULD BE", "REDRIVES", "DEAD FOR", "ERROR", "WHY"}, func(row func(...any)) {
		for _, d := range res.Domains {
			for _, p := range d.Partitions {
				for _, r := range p.Records {
					row(p.Topic, p.Partition, r.Offset, r.Key, r.Outcome, r.Redrives, age(time.Since(r.DeadSince)), dash(r.Error), dash(r.Why))
				}
			}
		}
	})
}

// horizonFlag defines --horizon: how old an order or view event may be and
// still be applied when re-driven.
func horizonFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("horizon", reclaim.DefaultHorizon,
		"product-consumers' idempotency horizon (PRODUCT_CONSUMERS_HANDLED_RETENTION minus PRODUCT_CONSUMERS_HORIZON_MARGIN): older order and view events are shown, and parked, as expired")
}

// recordsFlag collects --record PARTITION:OFFSET values.
type recordsFlag map[string]bool

func (f recordsFlag) String() string { return strings.Join(slices.Sorted(maps.Keys(f)), ",") }

func (f recordsFlag) Set(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		p, o, ok := strings.Cut(strings.TrimSpace(item), ":")
		pn, perr := strconv.ParseInt(p, 10, 32)
		on, oerr := strconv.ParseInt(o, 10, 64)
		if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
			return fmt.Errorf("want PARTITION:OFFSET, got %q", item)
		}
		f[strconv.FormatInt(pn, 10)+":"+strconv.FormatInt(on, 10)] = true
	}
	return nil
}

// age prints a duration for people: rounded, "-" for none.
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// redrives prints {0: 2, 3: 1} as "0×2 3×1".
func redrives(m map[int]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// topError prints the most frequent error and its count.
func topError(m map[string]int64) string {
	best, n := "", int64(0)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > n {
			best, n = k, m[k]
		}
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d× %s", n, best)
}
