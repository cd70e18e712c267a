-- +goose Up

-- The W3C trace context of the span that created each event (the
-- commerce-api's "create <topic>" span), written in the same transaction as
-- the row, so that the relay publishes the event with it and the trace
-- continues from the request through Kafka to the consumers. NULL when the
-- writer traced nothing (tracing off, or a writer without tracing): such
-- rows stay valid and are published without trace headers. outbox_failed
-- keeps the context, so that a re-driven event continues the same trace.
ALTER TABLE outbox ADD COLUMN traceparent TEXT, ADD COLUMN tracestate TEXT;
ALTER TABLE outbox_failed ADD COLUMN traceparent TEXT, ADD COLUMN tracestate TEXT;

-- +goose Down
ALTER TABLE outbox_failed DROP COLUMN traceparent, DROP COLUMN tracestate;
ALTER TABLE outbox DROP COLUMN traceparent, DROP COLUMN tracestate;
