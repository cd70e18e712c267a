-- +goose Up

-- An event's sequence is the outbox id it was first written with. It travels
-- as the CloudEvents `sequence` extension, and the like consumer orders a
-- user's like/cancel by it. A re-driven event gets a new outbox id (the relay
-- only reads ids above its cursor) but must keep its sequence, or a replayed
-- old like would win over a later cancel. NULL means "the row's own id": no
-- writer has to change, and the hot insert path pays nothing.
ALTER TABLE outbox ADD COLUMN sequence BIGINT CHECK (sequence > 0);

-- outbox_failed keeps the sequence of the row it came from, so a row that
-- fails again after a re-drive still remembers its first outbox id. NULL on
-- rows written before this migration means outbox_id.
ALTER TABLE outbox_failed ADD COLUMN sequence BIGINT CHECK (sequence > 0);

-- +goose StatementBegin
CREATE FUNCTION outbox_failed_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sequence IS NULL THEN
        SELECT o.sequence INTO NEW.sequence FROM outbox o WHERE o.id = NEW.outbox_id;
        NEW.sequence := COALESCE(NEW.sequence, NEW.outbox_id);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_failed_sequence BEFORE INSERT ON outbox_failed
    FOR EACH ROW EXECUTE FUNCTION outbox_failed_sequence();

-- The audit of re-drives: one row per outbox_failed row moved back into the
-- outbox, with who asked, when, and what the failed row said.
CREATE TABLE outbox_redrive (
    id              BIGSERIAL    PRIMARY KEY,
    failed_id       BIGINT       NOT NULL,  -- outbox_failed.id (that row is gone)
    failed_outbox_id BIGINT      NOT NULL,  -- the outbox id that failed
    new_outbox_id   BIGINT       NOT NULL,  -- the outbox id it was re-driven as
    event_id        UUID         NOT NULL,
    sequence        BIGINT       NOT NULL,
    event_type      VARCHAR(100) NOT NULL,
    error_message   TEXT         NOT NULL,
    failed_at       TIMESTAMPTZ  NOT NULL,
    redriven_by     VARCHAR(200) NOT NULL CHECK (redriven_by <> ''),
    redriven_at     TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX outbox_redrive_event_id_idx ON outbox_redrive (event_id);

-- +goose Down
DROP TABLE outbox_redrive;
DROP TRIGGER outbox_failed_sequence ON outbox_failed;
DROP FUNCTION outbox_failed_sequence();
ALTER TABLE outbox_failed DROP COLUMN sequence;
ALTER TABLE outbox DROP COLUMN sequence;
