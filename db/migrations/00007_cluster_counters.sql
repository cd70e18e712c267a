-- +goose Up
-- The owner process's pcon counters for each partition it owns (they count
-- since that process started), published with its heartbeat: the live page's
-- dead letters and events per second per consumer group.
ALTER TABLE cluster_assignments ADD COLUMN processed BIGINT, ADD COLUMN dead_lettered BIGINT;

-- +goose Down
ALTER TABLE cluster_assignments DROP COLUMN processed, DROP COLUMN dead_lettered;
