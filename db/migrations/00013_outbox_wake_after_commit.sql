-- The relay's wake-up leaves the writer's transaction. A transaction that
-- NOTIFYs holds PostgreSQL's database-wide notify lock from pre-commit until
-- its commit record is flushed, so every API write with the outbox_notify
-- trigger committed alone, one after another, instead of sharing WAL
-- flushes with the others (bench/api measured 0.42x the commit rate). The
-- writers now notify after their commit, from a connection of their own,
-- coalesced to one notification in flight per process (pg.Notifier); a
-- commit whose notification is lost is read by the relay's poll.
-- +goose Up
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
