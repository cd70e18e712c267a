package telemetry

import (
	"context"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer is a pgx.QueryTracer emitting a client span per statement
// (transaction control included: BEGIN and COMMIT are statements too), per
// batch and per COPY. It
// starts spans only under a recording span: a statement outside any traced
// work (the relay's idle polls, the cluster heartbeat) would otherwise be a
// trace of its own every few seconds.
type PgxTracer struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	op := operation(data.SQL)
	name := op
	if name == "" {
		name = "postgresql"
	}
	ctx, _ = Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(Database(data.SQL, op)...))
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	endSpan(ctx, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer: a batch (one round trip of
// several statements, as the consumers' aggregate transactions send them)
// is one span, each statement an event on it.
func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	ctx, _ = Tracer().Start(ctx, "BATCH", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, semconv.DBOperationName("BATCH"), semconv.DBOperationBatchSize(data.Batch.Len())))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := Database(data.SQL, operation(data.SQL))
	if data.Err != nil {
		attrs = append(attrs, semconv.ExceptionMessage(data.Err.Error()))
	}
	span.AddEvent("statement", trace.WithAttributes(attrs...))
}

// TraceBatchEnd implements pgx.BatchTracer.
func (PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	endSpan(ctx, data.Err)
}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (PgxTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	table := data.TableName.Sanitize()
	ctx, _ = Tracer().Start(ctx, "COPY "+table, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, semconv.DBOperationName("COPY"), semconv.DBCollectionName(table)))
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (PgxTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromEndData) {
	endSpan(ctx, data.Err)
}

// endSpan ends the span a Trace*Start call started, if it started one.
func endSpan(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// operation returns the first keyword of query, upper-cased: the statement's
// operation as far as can be told without parsing it.
func operation(query string) string {
	query = strings.TrimLeftFunc(query, unicode.IsSpace)
	end := strings.IndexFunc(query, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(query)
	}
	return strings.ToUpper(query[:end])
}
