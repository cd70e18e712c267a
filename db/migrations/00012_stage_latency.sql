-- +goose Up
-- What each node timed of an event's stages (package internal/stages) over
-- its last heartbeat's window: a JSON array of {stage, seconds, count, sum,
-- max, buckets}, replaced by every heartbeat; NULL for a node that times no
-- stage. The live page reads it: commerce-api cannot scrape the other
-- processes' histograms.
ALTER TABLE cluster_nodes ADD COLUMN stage_latency JSONB;

-- +goose Down
ALTER TABLE cluster_nodes DROP COLUMN stage_latency;
