package telemetry

import (
	"context"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer is a pgx.QueryTracer emitting a client span per statement
// (transaction control included: BEGIN and COMMIT are statements too). It
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
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
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
