package main

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	// The "pgx" database/sql driver.
	_ "github.com/jackc/pgx/v5/stdlib"
)

// watermillTopic is the forwarder's topic: the SQL subscriber reads it
// through outboxSchema, which maps it onto our outbox table.
const watermillTopic = "outbox"

// watermillOffsetsTable is where watermill-sql's PostgreSQL offsets
// adapter keeps the forwarder's position in the outbox.
const watermillOffsetsTable = `watermill_offsets_` + watermillTopic

// outboxSchema is a watermill-sql schema adapter over our outbox table, as
// a Go team with rows written by internal/outbox would write one: it hands
// each row to the forwarder in its envelope (destination topic by the row's
// aggregate type, the row's event_id as the message UUID, the aggregate id
// as the partition key). Writing goes through internal/outbox, never
// through watermill's publisher.
//
// It reads the rows as watermill's own PostgreSQL schema reads its table:
// in transaction order, only from transactions older than the oldest one
// still running, after the last acknowledged (transaction, offset). Our
// table has no transaction id column, so the row's xmin stands for it
// (xmin is 32 bits; it equals the 64-bit id on a cluster that has not
// wrapped around, such as the benchmark's fresh one), and each SELECT scans
// the rows instead of walking an index. Reading by id alone would skip a
// row whose transaction took a lower id but committed after a higher one:
// with eight writers it lost one row in 400 in this benchmark.
type outboxSchema struct {
	prefix string
	batch  int
}

func (outboxSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil // the migrations created the table
}

func (outboxSchema) InsertQuery(wsql.InsertQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errors.New("outbox rows are written through internal/outbox")
}

func (s outboxSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := p.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: p.Topic, ConsumerGroup: p.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, err
	}
	return wsql.Query{
		Query: `WITH last_processed AS (` + next.Query + `)
			SELECT id, tx, event_id, aggregate_type, aggregate_id, payload FROM (
				SELECT *, xmin::text::xid8 AS tx FROM outbox
			) rows
			WHERE ((tx = (SELECT last_processed_transaction_id FROM last_processed)
					AND id > (SELECT offset_acked FROM last_processed))
				OR tx > (SELECT last_processed_transaction_id FROM last_processed))
				AND tx < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY tx, id LIMIT ` + fmt.Sprint(s.batch),
		Args: next.Args,
	}, nil
}

func (s outboxSchema) UnmarshalMessage(p wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		r                   wsql.Row
		tx                  wsql.XID8
		eventID, aggregate  string
		aggregateID, record string
	)
	if err := p.Row.Scan(&r.Offset, &tx, &eventID, &aggregate, &aggregateID, &record); err != nil {
		return wsql.Row{}, fmt.Errorf("scan an outbox row: %w", err)
	}
	envelope, err := json.Marshal(map[string]any{
		"destination_topic": s.prefix + aggregate,
		"uuid":              eventID,
		"payload":           []byte(record),
		"metadata":          map[string]string{"partition_key": aggregateID},
	})
	if err != nil {
		return wsql.Row{}, err
	}
	r.UUID = []byte(eventID)
	r.Payload = envelope
	r.Msg = message.NewMessage(eventID, envelope)
	// The offsets adapter acknowledges the (transaction, offset) pair.
	r.ExtraData = map[string]any{"transaction_id": tx}
	return r, nil
}

func (outboxSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelRepeatableRead // watermill's PostgreSQL schemas' level
}

// watermillPeer runs watermill's forwarder from the outbox to Kafka until
// SIGTERM, then prints its JSON line.
func watermillPeer(args []string) error {
	fs := flag.NewFlagSet("watermill-peer", flag.ContinueOnError)
	dbURL := fs.String("database-url", "", "")
	brokers := fs.String("brokers", "", "")
	prefix := fs.String("prefix", "", "topic prefix")
	poll := fs.Duration("poll", time.Second, "the SQL subscriber's PollInterval")
	batch := fs.Int("batch", 100, "rows per SELECT")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := stdsql.Open("pgx", *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		ConsumerGroup:    "forwarder",
		PollInterval:     *poll,
		SchemaAdapter:    outboxSchema{prefix: *prefix, batch: *batch},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return err
	}
	pub, err := wkafka.NewPublisher(wkafka.PublisherConfig{
		Brokers: strings.Split(*brokers, ","),
		Marshaler: wkafka.NewWithPartitioningMarshaler(func(_ string, m *message.Message) (string, error) {
			return m.Metadata.Get("partition_key"), nil
		}),
	}, logger)
	if err != nil {
		return err
	}
	fwd, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: watermillTopic})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- fwd.Run(ctx) }()
	select {
	case err := <-errc:
		return fmt.Errorf("the forwarder stopped: %w", err)
	case <-ctx.Done():
	}
	if err := fwd.Close(); err != nil {
		return err
	}
	line, err := json.Marshal(map[string]string{
		"peer": "watermill", "version": moduleVersion("github.com/ThreeDotsLabs/watermill"),
		"client": "watermill-sql " + moduleVersion("github.com/ThreeDotsLabs/watermill-sql/v4") +
			", watermill-kafka " + moduleVersion("github.com/ThreeDotsLabs/watermill-kafka/v3") +
			", sarama " + moduleVersion("github.com/IBM/sarama"),
	})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
