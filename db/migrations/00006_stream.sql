-- +goose Up

-- The live stream (GET /api/v1/stream) follows product_metrics. Every write
-- stamps the row with the id of the transaction that made it; the stream reads
-- "rows written by a transaction id >= W" from one snapshot and hands out the
-- snapshot's xmin as the next W. Every transaction below a snapshot's xmin has
-- ended, so a change is either already visible to the read that moved W past
-- it or has an id >= W and is read later: a reconnecting client that sends
-- back the last W it saw misses nothing (it may see a product twice).
ALTER TABLE product_metrics ADD COLUMN change_xid xid8 NOT NULL DEFAULT '0';
CREATE INDEX product_metrics_change_xid_idx ON product_metrics (change_xid);

-- +goose StatementBegin
CREATE FUNCTION product_metrics_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER product_metrics_stamp BEFORE INSERT OR UPDATE ON product_metrics
    FOR EACH ROW EXECUTE FUNCTION product_metrics_stamp();

-- Wake the stream on commit. One notification per statement, not per row:
-- the stream reads every change since its watermark anyway, so the product ids
-- would only cost the writer; PostgreSQL delivers it only on commit and folds
-- repeats within a transaction into one.
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

-- +goose Down
DROP TRIGGER product_metrics_notify ON product_metrics;
DROP FUNCTION product_metrics_notify();
DROP TRIGGER product_metrics_stamp ON product_metrics;
DROP FUNCTION product_metrics_stamp();
DROP INDEX product_metrics_change_xid_idx;
ALTER TABLE product_metrics DROP COLUMN change_xid;
