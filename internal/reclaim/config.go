package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// HeaderRedriveCount counts how often a record was re-driven from a DLT. It
// travels with the record, so a record dead-lettered again carries it into
// the DLT (pcon copies the record's headers) and is parked once it reached
// Config.MaxRedrives. The reclaimer's headers carry pcon's prefix, so a
// re-drive drops them with pcon's before adding its own.
const HeaderRedriveCount = pcon.HeaderPrefix + "redrive-count"

// HeaderParkedReason and HeaderParkedAt say why and when the reclaimer
// parked a record; it keeps every other header of the DLT record.
const (
	HeaderParkedReason = pcon.HeaderPrefix + "parked-reason"
	HeaderParkedAt     = pcon.HeaderPrefix + "parked-at"
)

// ParkedGroup is the consumer group whose committed offsets in the parked
// topics mark how far `pipelinectl parked redrive` got.
const ParkedGroup = "pcon-parked-redriver"

// Group is the consumer group whose committed offsets in the .DLT topics
// mark how far reclaiming got. The scheduled reclaimer and pipelinectl share
// it, so a record re-driven by hand is not re-driven again by the schedule.
const Group = "pcon-reclaimer"

// Outcome is what a pass did with one DLT record.
type Outcome string

// The outcomes, used as the `outcome` metric label.
const (
	Redriven Outcome = "redriven" // republished to its original topic
	Parked   Outcome = "parked"   // not worth re-driving (see Record.Why): copied to the parked topic, committed past
	Skipped  Outcome = "skipped"  // not written by pcon (no origin headers): left in the DLT
	Failed   Outcome = "failed"   // the republish failed: retried next pass
	// Expired: its event is older than its consumers' idempotency horizon,
	// so they would skip it, re-driven or not: copied to the parked topic
	// with that reason and committed past, never re-driven in silence.
	Expired Outcome = "expired"
)

var outcomes = []Outcome{Redriven, Parked, Skipped, Failed, Expired}

// HorizonTopics are the topics whose consumers skip an event older than
// their idempotency horizon (product-consumers' order and view consumers:
// each event counts once, and past the horizon its idempotency record may
// be purged). Likes and stock events carry their own guards and have none.
// product-consumers' tests check the list against its handlers.
var HorizonTopics = []string{"order-events", "product-events"}

// DefaultHorizon is product-consumers' idempotency horizon with its shipped
// settings: PRODUCT_CONSUMERS_HANDLED_RETENTION (7 days) minus PRODUCT_CONSUMERS_HORIZON_MARGIN
// (1 hour).
const DefaultHorizon = 7*24*time.Hour - time.Hour

// MaxTotal bounds the records one operator's pass (Options.Total) takes.
const MaxTotal = 10_000

// Chunk bounds the records one republish sends and one commit covers: a
// pass takes a partition chunk by chunk, holding at most Chunk records at a
// time and saving its progress after each.
const Chunk = 500

// Config configures a Reclaimer.
type Config struct {
	// Kafka is how to reach the brokers (KAFKA_*); its prefix names the
	// domains of Topics in metric labels.
	Kafka kafka.Settings
	// ClientID names the Kafka client ("reclaimer" when empty).
	ClientID string
	// Topics are the original topics (one per domain), named on the
	// cluster; their dead-letter topics are topic+DLTSuffix.
	Topics    []string
	DLTSuffix string
	// ParkSuffix, when set, names the parked topic (topic+ParkSuffix) a
	// parked record is copied to, with its reason, before the pass commits
	// past it: the DLT's retention then cannot lose it. Empty leaves parked
	// records in the source topic only.
	ParkSuffix string
	// Group is the consumer group (named on the cluster) whose committed
	// offsets mark how far each DLT partition was reclaimed.
	Group string
	// MinIdle is how long a record must have been in the DLT before it is
	// re-driven: a pass stops at the first younger record of a partition.
	MinIdle time.Duration
	// Count bounds the records taken from one partition in one pass.
	Count int
	// MaxRedrives is how often a record may be re-driven; after that it
	// stays parked.
	MaxRedrives int
	// Horizon, when positive, is how old an event of HorizonTopics (named
	// on the cluster) may be (by its CloudEvents time) and still be applied
	// by its consumers; an older one is Expired rather than re-driven to be
	// skipped.
	Horizon       time.Duration
	HorizonTopics []string
	// ReadTimeout bounds the wait for a record known to exist (default 10 s).
	ReadTimeout time.Duration
	// SilentBroker is how long a broker may leave a probe unanswered before
	// the reclaimer gives up every request waiting on it (brokerwatch), so
	// that a pass follows a frozen broker's partitions and the group's
	// coordinator to their new leaders instead of waiting out sarama's
	// read timeout (default 3 s).
	SilentBroker time.Duration
	Logger       *slog.Logger
	// Registerer receives the reclaim metrics; nil registers none.
	Registerer prometheus.Registerer
	// Lock, when set, excludes other processes from a DLT partition while a
	// pass takes it (see Locker); nil excludes only passes of this
	// Reclaimer.
	Lock Locker
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Kafka.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("no topics"))
	}
	if c.DLTSuffix == "" || c.Group == "" {
		errs = append(errs, errors.New("DLTSuffix and Group are required"))
	}
	if c.Count <= 0 || c.MaxRedrives < 0 || c.MinIdle < 0 {
		errs = append(errs, fmt.Errorf("count %d must be positive, max re-drives %d and min idle %s not negative", c.Count, c.MaxRedrives, c.MinIdle))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("no logger"))
	}
	if c.ClientID == "" {
		c.ClientID = "reclaimer"
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	return errors.Join(errs...)
}

// Locker excludes re-drivers of one DLT partition from each other across
// processes: every scheduled reclaimer, whatever topics it was given, and
// every pipelinectl run. TryLock returns ok false when another holds the
// partition; the pass then leaves it for now (PartitionResult.Busy).
type Locker interface {
	TryLock(ctx context.Context, dltTopic string, partition int32) (unlock func(), ok bool, err error)
}

type tp struct {
	topic     string
	partition int32
}

// PGLock is a Locker over PostgreSQL advisory locks in the pg.ReclaimLock
// namespace, one per DLT partition, held on a connection of db's for the
// partition's turn in a pass. Every process that re-drives must use it
// against the same database.
func PGLock(db *pg.DB) Locker { return pgLock{db} }

type pgLock struct{ db *pg.DB }

func (l pgLock) TryLock(ctx context.Context, dltTopic string, partition int32) (func(), bool, error) {
	return l.db.TryLock(ctx, pg.ReclaimLock, dltTopic+"/"+strconv.Itoa(int(partition)))
}
