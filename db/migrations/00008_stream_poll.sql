-- +goose Up

-- The live stream no longer needs a wake-up from product_metrics' writers: a
-- transaction that NOTIFYs takes PostgreSQL's database-wide notify lock from
-- pre-commit until its commit record is flushed, so every aggregate commit
-- would queue behind every other one (and behind every outbox insert) instead
-- of group-committing. The stream's hub reads "rows with change_xid >= W"
-- through product_metrics_change_xid_idx at its coalescing interval instead,
-- and only while a stream is open.
DROP TRIGGER product_metrics_notify ON product_metrics;
DROP FUNCTION product_metrics_notify();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION product_metrics_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('product_metrics_changed', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER product_metrics_notify AFTER INSERT OR UPDATE ON product_metrics
    FOR EACH STATEMENT EXECUTE FUNCTION product_metrics_notify();
