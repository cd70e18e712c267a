-- +goose Up

-- instance: a random nonce each process writes when it joins. A heartbeat
-- that finds another nonce in its row means a second live process claims the
-- same node id (two pods with one CLUSTER_NODE_ID, say): id_conflict_at says
-- when it was last seen, and both processes report it.
-- retention: the CLUSTER_RETENTION the node purges with. Every node's purge
-- keeps what the longest retention of a live node keeps, so nodes with
-- different settings purge by one retention instead of the shortest winning.
ALTER TABLE cluster_nodes ADD COLUMN instance TEXT, ADD COLUMN id_conflict_at TIMESTAMPTZ, ADD COLUMN retention INTERVAL;

-- The view's n.* was expanded when it was created: create it again so that
-- it carries the new columns.
DROP VIEW cluster_node_status;
CREATE VIEW cluster_node_status AS
SELECT n.*,
       CASE WHEN n.left_at IS NOT NULL THEN 'LEFT'
            WHEN now() - n.last_heartbeat >= n.down_after THEN 'DOWN'
            WHEN now() - n.last_heartbeat >= n.suspect_after THEN 'SUSPECT'
            ELSE 'ALIVE' END AS status,
       now() - n.last_heartbeat AS heartbeat_age
FROM cluster_nodes n;

-- +goose Down
DROP VIEW cluster_node_status;
ALTER TABLE cluster_nodes DROP COLUMN instance, DROP COLUMN id_conflict_at, DROP COLUMN retention;
CREATE VIEW cluster_node_status AS
SELECT n.*,
       CASE WHEN n.left_at IS NOT NULL THEN 'LEFT'
            WHEN now() - n.last_heartbeat >= n.down_after THEN 'DOWN'
            WHEN now() - n.last_heartbeat >= n.suspect_after THEN 'SUSPECT'
            ELSE 'ALIVE' END AS status,
       now() - n.last_heartbeat AS heartbeat_age
FROM cluster_nodes n;
