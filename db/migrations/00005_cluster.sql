-- +goose Up

-- The cluster registry (internal/cluster). Every service instance is a
-- node; its status is derived from last_heartbeat on the database clock
-- (cluster_node_status below), never stored, so a node's own clock cannot
-- make it look alive. Each node writes the thresholds it heartbeats with,
-- so nodes with different intervals are judged by their own.
CREATE TABLE cluster_nodes (
    node_id        VARCHAR(200) PRIMARY KEY,
    service        VARCHAR(100) NOT NULL,
    roles          TEXT[]       NOT NULL DEFAULT '{}',
    host           VARCHAR(255) NOT NULL,
    version        VARCHAR(100) NOT NULL,
    started_at     TIMESTAMPTZ  NOT NULL,
    last_heartbeat TIMESTAMPTZ  NOT NULL,
    suspect_after  INTERVAL     NOT NULL,
    down_after     INTERVAL     NOT NULL,
    left_at        TIMESTAMPTZ,
    heartbeats     BIGINT       NOT NULL DEFAULT 1
);

CREATE VIEW cluster_node_status AS
SELECT n.*,
       CASE WHEN n.left_at IS NOT NULL THEN 'LEFT'
            WHEN now() - n.last_heartbeat >= n.down_after THEN 'DOWN'
            WHEN now() - n.last_heartbeat >= n.suspect_after THEN 'SUSPECT'
            ELSE 'ALIVE' END AS status,
       now() - n.last_heartbeat AS heartbeat_age
FROM cluster_nodes n;

-- Who led the relay lease and why it changed, written by a trigger on
-- relay_lease so the relay itself needs no code for it.
CREATE TABLE cluster_leader_history (
    id     BIGSERIAL    PRIMARY KEY,
    lease  VARCHAR(100) NOT NULL,
    owner  VARCHAR(200) NOT NULL,
    token  BIGINT       NOT NULL,
    at     TIMESTAMPTZ  NOT NULL,
    reason VARCHAR(20)  NOT NULL CHECK (reason IN ('acquired', 'expired', 'released'))
);
CREATE INDEX cluster_leader_history_lease ON cluster_leader_history (lease, id DESC);

-- +goose StatementBegin
CREATE FUNCTION cluster_record_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cluster_leader_history (lease, owner, token, at, reason)
        VALUES (NEW.name, NEW.owner, NEW.token, NEW.acquired_at, 'acquired');
    ELSIF NEW.token <> OLD.token THEN
        -- A new term. The old one ended by expiry unless it was released
        -- (lease_until = -infinity, recorded when it happened).
        IF OLD.lease_until <> '-infinity' THEN
            INSERT INTO cluster_leader_history (lease, owner, token, at, reason)
            VALUES (OLD.name, OLD.owner, OLD.token, OLD.lease_until, 'expired');
        END IF;
        INSERT INTO cluster_leader_history (lease, owner, token, at, reason)
        VALUES (NEW.name, NEW.owner, NEW.token, NEW.acquired_at, 'acquired');
    ELSIF NEW.lease_until = '-infinity' AND OLD.lease_until <> '-infinity' THEN
        INSERT INTO cluster_leader_history (lease, owner, token, at, reason)
        VALUES (NEW.name, NEW.owner, NEW.token, clock_timestamp(), 'released');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER relay_lease_history AFTER INSERT OR UPDATE ON relay_lease
FOR EACH ROW EXECUTE FUNCTION cluster_record_lease();

-- Who owns each partition of each consumer group, as the owners' assignment
-- hooks report it (the Kafka group is the authority). version grows with
-- every new assignment of the row; an owner's later writes (lag, release)
-- carry the version it was given and change nothing once it is superseded.
CREATE TABLE cluster_assignments (
    group_id      VARCHAR(200) NOT NULL,
    topic         VARCHAR(249) NOT NULL,
    partition     INT          NOT NULL,
    node_id       VARCHAR(200) NOT NULL,
    epoch         BIGINT       NOT NULL,
    version       BIGINT       NOT NULL DEFAULT 1,
    assigned_at   TIMESTAMPTZ  NOT NULL,
    start_offset  BIGINT       NOT NULL,
    released_at   TIMESTAMPTZ,
    true_lag      BIGINT,
    gap_size      BIGINT,
    blocking      BIGINT,
    lag_at        TIMESTAMPTZ,
    first_handled_at TIMESTAMPTZ,
    moves         BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, topic, partition)
);

-- One row per release of a partition: the offset committed at release and
-- how many records the assignment completed, for the next owner and for
-- the operator.
CREATE TABLE cluster_handoffs (
    id           BIGSERIAL    PRIMARY KEY,
    group_id     VARCHAR(200) NOT NULL,
    topic        VARCHAR(249) NOT NULL,
    partition    INT          NOT NULL,
    node_id      VARCHAR(200) NOT NULL,
    version      BIGINT       NOT NULL,
    epoch        BIGINT       NOT NULL,
    committed    BIGINT       NOT NULL,
    completed    BIGINT       NOT NULL,
    applied      BOOLEAN      NOT NULL,
    released_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX cluster_handoffs_partition ON cluster_handoffs (group_id, topic, partition, id DESC);

-- +goose Down
DROP TABLE cluster_handoffs;
DROP TABLE cluster_assignments;
DROP TRIGGER relay_lease_history ON relay_lease;
DROP FUNCTION cluster_record_lease();
DROP TABLE cluster_leader_history;
DROP VIEW cluster_node_status;
DROP TABLE cluster_nodes;
