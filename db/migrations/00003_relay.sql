-- +goose Up

-- The outbox relay's leader lease: one row per lease name. A node holds the
-- lease while lease_until is in the future; token grows by one with every new
-- term (a new owner, or the same owner after its lease lapsed), so writes
-- that carry an older token are refused (fencing).
CREATE TABLE relay_lease (
    name        VARCHAR(100) PRIMARY KEY,
    owner       VARCHAR(200) NOT NULL,
    token       BIGINT       NOT NULL CHECK (token > 0),
    lease_until TIMESTAMPTZ  NOT NULL,
    acquired_at TIMESTAMPTZ  NOT NULL
);

-- +goose Down
DROP TABLE relay_lease;
