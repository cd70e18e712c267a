-- +goose Up

-- The relay's ordered retry holds back only the partition of an event the
-- cluster did not acknowledge, and lets the cursor pass it: the rows it
-- passed without publishing are kept here, in the same statement that moves
-- the cursor past them, so that a relay killed, or a lease handed over,
-- leaves the next leader publishing them, in id order, before any later row
-- of their partition. A row leaves this table when it is published, or when
-- it moves to outbox_failed. Rows at or below the cursor that are held are
-- not published yet: retention keeps them.
CREATE TABLE outbox_held (
    outbox_id BIGINT      PRIMARY KEY,
    held_at   TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE outbox_held;
