-- +goose Up

-- Catalog and orders: owned by commerce-api.
CREATE TABLE products (
    id         BIGSERIAL PRIMARY KEY,
    name       VARCHAR(200) NOT NULL CHECK (name <> ''),
    price      BIGINT       NOT NULL CHECK (price >= 0),
    stock      BIGINT       NOT NULL CHECK (stock >= 0), -- never oversold
    created_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ  NOT NULL DEFAULT now()
);

CREATE TABLE likes (
    user_id    VARCHAR(64) NOT NULL,
    product_id BIGINT      NOT NULL REFERENCES products (id),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, product_id) -- a user likes a product at most once
);
CREATE INDEX likes_product_id_idx ON likes (product_id);

CREATE TABLE orders (
    id           BIGSERIAL PRIMARY KEY,
    user_id      VARCHAR(64) NOT NULL,
    status       VARCHAR(16) NOT NULL CHECK (status IN ('PENDING', 'PAID')),
    total_amount BIGINT      NOT NULL CHECK (total_amount >= 0),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX orders_user_id_idx ON orders (user_id);

CREATE TABLE order_items (
    id         BIGSERIAL PRIMARY KEY,
    order_id   BIGINT NOT NULL REFERENCES orders (id),
    product_id BIGINT NOT NULL REFERENCES products (id),
    quantity   BIGINT NOT NULL CHECK (quantity > 0),
    unit_price BIGINT NOT NULL CHECK (unit_price >= 0)
);
CREATE INDEX order_items_order_id_idx ON order_items (order_id);

CREATE TABLE payments (
    id         BIGSERIAL PRIMARY KEY,
    order_id   BIGINT      NOT NULL UNIQUE REFERENCES orders (id), -- an order is paid once
    amount     BIGINT      NOT NULL CHECK (amount >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The transactional outbox: commerce-api appends, outbox-relay reads.
CREATE SEQUENCE outbox_id_seq AS BIGINT;

-- outbox_next_id makes sure the inserting transaction owns a transaction id
-- before it draws its outbox id. The relay treats a missing id as "possibly in
-- flight" while any transaction that was running when it saw the gap is still
-- running; a transaction that had drawn an id but had no xid yet would not be
-- in that set, and its row could be skipped. Taking the xid first closes that
-- window whatever the caller did before the insert.
-- +goose StatementBegin
CREATE FUNCTION outbox_next_id() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('outbox_id_seq');
END;
$$;
-- +goose StatementEnd

CREATE TABLE outbox (
    id             BIGINT       PRIMARY KEY DEFAULT outbox_next_id(),
    event_id       UUID         NOT NULL UNIQUE,
    event_type     VARCHAR(100) NOT NULL,
    source         VARCHAR(50)  NOT NULL,
    aggregate_type VARCHAR(50)  NOT NULL,
    aggregate_id   VARCHAR(50)  NOT NULL,
    payload        TEXT         NOT NULL,
    next_retry_at  TIMESTAMPTZ,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT now()
);
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;

-- Wake the relay on commit: NOTIFY is delivered only when the inserting
-- transaction commits, and repeated notifications in one transaction collapse
-- into one. A trigger covers every writer, not only commerce-api.
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

CREATE TABLE outbox_cursor (
    id                INT         PRIMARY KEY CHECK (id = 1),
    last_processed_id BIGINT      NOT NULL DEFAULT 0,
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO outbox_cursor (id, last_processed_id) VALUES (1, 0);

CREATE TABLE outbox_failed (
    id             BIGSERIAL PRIMARY KEY,
    outbox_id      BIGINT       NOT NULL UNIQUE,
    event_id       UUID         NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    source         VARCHAR(50)  NOT NULL,
    aggregate_type VARCHAR(50)  NOT NULL,
    aggregate_id   VARCHAR(50)  NOT NULL,
    payload        TEXT         NOT NULL,
    created_at     TIMESTAMPTZ  NOT NULL,
    error_message  TEXT         NOT NULL,
    failed_at      TIMESTAMPTZ  NOT NULL DEFAULT now()
);

-- Aggregates: owned by product-consumers, read by commerce-api.
CREATE TABLE product_metrics (
    product_id   BIGINT      PRIMARY KEY,
    like_count   BIGINT      NOT NULL DEFAULT 0,
    sales_count  BIGINT      NOT NULL DEFAULT 0,
    sales_amount BIGINT      NOT NULL DEFAULT 0,
    view_count   BIGINT      NOT NULL DEFAULT 0,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX product_metrics_like_count_idx ON product_metrics (like_count DESC, product_id DESC);
CREATE INDEX product_metrics_sales_count_idx ON product_metrics (sales_count DESC, product_id DESC);
CREATE INDEX product_metrics_view_count_idx ON product_metrics (view_count DESC, product_id DESC);

CREATE TABLE event_handled (
    id              BIGSERIAL PRIMARY KEY,
    idempotency_key VARCHAR(200) NOT NULL UNIQUE, -- '{consumerGroup}:{eventId}'
    created_at      TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX event_handled_created_at_idx ON event_handled (created_at);

-- The last like or cancel applied per (user, product), with its event
-- sequence, so a redelivered or reordered event cannot move like_count twice.
CREATE TABLE product_like_state (
    user_id    VARCHAR(64) NOT NULL,
    product_id BIGINT      NOT NULL,
    liked      BOOLEAN     NOT NULL,
    sequence   BIGINT      NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, product_id)
);

-- +goose Down
DROP TABLE product_like_state;
DROP TABLE event_handled;
DROP TABLE product_metrics;
DROP TABLE outbox_failed;
DROP TABLE outbox_cursor;
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox;
DROP FUNCTION outbox_next_id();
DROP TABLE payments;
DROP TABLE order_items;
DROP TABLE orders;
DROP TABLE likes;
DROP TABLE products;
