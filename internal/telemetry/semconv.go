package telemetry

import (
	"context"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The pipeline emits the names of SchemaURL. Where a name changed since the
// conventions the established tools still emit (messaging before v1.26,
// database before v1.26), OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup or
// database/dup adds the older names beside the current ones, so that
// dashboards built on the old names keep working during a migration, the
// way the specification's "/dup" values do for HTTP (which otelhttp
// honours itself). "messaging" and "database" alone, or nothing, emit the
// current names only: there is no older instrumentation of ours to stay
// compatible with.
var dupMessaging, dupDatabase atomic.Bool

func setOptIn(v string) {
	var msg, db bool
	for item := range strings.SplitSeq(v, ",") {
		switch strings.TrimSpace(item) {
		case "messaging/dup":
			msg = true
		case "database/dup":
			db = true
		}
	}
	dupMessaging.Store(msg)
	dupDatabase.Store(db)
}

// DupMessaging reports whether OTEL_SEMCONV_STABILITY_OPT_IN asked for the
// older messaging names too.
func DupMessaging() bool { return dupMessaging.Load() }

// DupDatabase reports whether OTEL_SEMCONV_STABILITY_OPT_IN asked for the
// older database names too.
func DupDatabase() bool { return dupDatabase.Load() }

// Older messaging attribute names (semantic conventions up to v1.25), and
// the database ones (up to v1.25), emitted only with the "/dup" opt-in.
const (
	oldMessagingOperation = attribute.Key("messaging.operation")
	oldDBSystem           = attribute.Key("db.system")
	oldDBStatement        = attribute.Key("db.statement")
	oldDBOperation        = attribute.Key("db.operation")
)

// Messaging returns the attributes of a Kafka messaging span of operation
// (create, send, process, settle) on topic: the operation's name and type,
// and with the "/dup" opt-in the older operation attribute too.
func Messaging(operation, topic string) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationName(operation),
		semconv.MessagingOperationTypeKey.String(operation),
		semconv.MessagingDestinationName(topic),
	}
	if DupMessaging() {
		old := operation
		if old == "send" { // v1.24's "publish"
			old = "publish"
		}
		kv = append(kv, oldMessagingOperation.String(old))
	}
	return kv
}

// StartCreate starts the producer span "create <topic>" of one message the
// pipeline creates (an outbox row): a child of ctx's span. Its context is
// what the message carries (traceparent, tracestate) to every later stage.
func StartCreate(ctx context.Context, topic, messageID, key string) (context.Context, trace.Span) {
	attrs := append(Messaging("create", topic), semconv.MessagingMessageID(messageID), semconv.MessagingKafkaMessageKey(key))
	return Tracer().Start(ctx, "create "+topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// Database returns the attributes of a PostgreSQL client span running
// query; operation is its first word (SELECT, INSERT, …).
func Database(query, operation string) []attribute.KeyValue {
	kv := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.DBQueryText(query)}
	if operation != "" {
		kv = append(kv, semconv.DBOperationName(operation))
	}
	if DupDatabase() {
		kv = append(kv, oldDBSystem.String("postgresql"), oldDBStatement.String(query))
		if operation != "" {
			kv = append(kv, oldDBOperation.String(operation))
		}
	}
	return kv
}
