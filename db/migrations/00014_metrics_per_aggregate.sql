-- +goose Up

-- One row per product and aggregate kind, so that no two consumer groups
-- wait on one row lock. product_metrics held likes, sales and views in one
-- row per product: the like, order and view consumers all updated it, so
-- under a flash sale the like group's and the view group's transactions of
-- the hot product queued on its row lock, one after the other. Each
-- aggregate now has a table of its own with one writer each
-- (product-consumers' like, order and view consumers), with what
-- product_metrics carried per row: the listing flag and index of its sort
-- (a partial index of listed rows, migration 00010), and the stamp of its
-- writer's transaction for the live stream (migration 00006).
CREATE TABLE product_likes (
    product_id BIGINT      PRIMARY KEY,
    like_count BIGINT      NOT NULL DEFAULT 0,
    listed     boolean     NOT NULL DEFAULT false,
    change_xid xid8        NOT NULL DEFAULT '0',
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE product_sales (
    product_id   BIGINT      PRIMARY KEY,
    sales_count  BIGINT      NOT NULL DEFAULT 0,
    sales_amount BIGINT      NOT NULL DEFAULT 0,
    listed       boolean     NOT NULL DEFAULT false,
    change_xid   xid8        NOT NULL DEFAULT '0',
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE product_views (
    product_id BIGINT      PRIMARY KEY,
    view_count BIGINT      NOT NULL DEFAULT 0,
    listed     boolean     NOT NULL DEFAULT false,
    change_xid xid8        NOT NULL DEFAULT '0',
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO product_likes (product_id, like_count, listed, change_xid, updated_at)
SELECT product_id, like_count, listed, change_xid, updated_at FROM product_metrics;
INSERT INTO product_sales (product_id, sales_count, sales_amount, listed, change_xid, updated_at)
SELECT product_id, sales_count, sales_amount, listed, change_xid, updated_at FROM product_metrics;
INSERT INTO product_views (product_id, view_count, listed, change_xid, updated_at)
SELECT product_id, view_count, listed, change_xid, updated_at FROM product_metrics;

CREATE INDEX product_likes_like_count_idx ON product_likes (like_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_sales_sales_count_idx ON product_sales (sales_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_views_view_count_idx ON product_views (view_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_likes_change_xid_idx ON product_likes (change_xid);
CREATE INDEX product_sales_change_xid_idx ON product_sales (change_xid);
CREATE INDEX product_views_change_xid_idx ON product_views (change_xid);

-- The stamp of migration 00006, on each table.
CREATE TRIGGER product_likes_stamp BEFORE INSERT OR UPDATE ON product_likes
    FOR EACH ROW EXECUTE FUNCTION product_metrics_stamp();
CREATE TRIGGER product_sales_stamp BEFORE INSERT OR UPDATE ON product_sales
    FOR EACH ROW EXECUTE FUNCTION product_metrics_stamp();
CREATE TRIGGER product_views_stamp BEFORE INSERT OR UPDATE ON product_views
    FOR EACH ROW EXECUTE FUNCTION product_metrics_stamp();

-- Every product gets its three rows, listed, in the transaction that
-- creates it (migrations 00009 and 00010).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION products_metrics_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO product_likes (product_id, listed) VALUES (NEW.id, true)
    ON CONFLICT (product_id) DO UPDATE SET listed = true;
    INSERT INTO product_sales (product_id, listed) VALUES (NEW.id, true)
    ON CONFLICT (product_id) DO UPDATE SET listed = true;
    INSERT INTO product_views (product_id, listed) VALUES (NEW.id, true)
    ON CONFLICT (product_id) DO UPDATE SET listed = true;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TABLE product_metrics;

-- The aggregates of a product in one row, for people and tests: every id
-- that has a row in any of the tables (the consumers count events of ids
-- that are no product too, unlisted). It is read only; commerce-api reads
-- the tables themselves, by primary key from products.
CREATE VIEW product_metrics AS
SELECT COALESCE(l.product_id, s.product_id, v.product_id) AS product_id,
       COALESCE(l.like_count, 0) AS like_count,
       COALESCE(s.sales_count, 0) AS sales_count,
       COALESCE(s.sales_amount, 0) AS sales_amount,
       COALESCE(v.view_count, 0) AS view_count,
       GREATEST(l.updated_at, s.updated_at, v.updated_at) AS updated_at,
       COALESCE(l.listed, s.listed, v.listed) AS listed,
       GREATEST(l.change_xid, s.change_xid, v.change_xid) AS change_xid
FROM product_likes l
FULL JOIN product_sales s ON s.product_id = l.product_id
FULL JOIN product_views v ON v.product_id = COALESCE(l.product_id, s.product_id);

-- +goose Down
DROP VIEW product_metrics;
CREATE TABLE product_metrics (
    product_id   BIGINT      PRIMARY KEY,
    like_count   BIGINT      NOT NULL DEFAULT 0,
    sales_count  BIGINT      NOT NULL DEFAULT 0,
    sales_amount BIGINT      NOT NULL DEFAULT 0,
    view_count   BIGINT      NOT NULL DEFAULT 0,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    change_xid   xid8        NOT NULL DEFAULT '0',
    listed       boolean     NOT NULL DEFAULT false
);
INSERT INTO product_metrics (product_id, like_count, sales_count, sales_amount, view_count, updated_at, change_xid, listed)
SELECT COALESCE(l.product_id, s.product_id, v.product_id), COALESCE(l.like_count, 0), COALESCE(s.sales_count, 0),
       COALESCE(s.sales_amount, 0), COALESCE(v.view_count, 0),
       GREATEST(l.updated_at, s.updated_at, v.updated_at), GREATEST(l.change_xid, s.change_xid, v.change_xid),
       COALESCE(l.listed, s.listed, v.listed)
FROM product_likes l
FULL JOIN product_sales s ON s.product_id = l.product_id
FULL JOIN product_views v ON v.product_id = COALESCE(l.product_id, s.product_id);
CREATE INDEX product_metrics_like_count_idx ON product_metrics (like_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_metrics_sales_count_idx ON product_metrics (sales_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_metrics_view_count_idx ON product_metrics (view_count DESC, product_id DESC) WHERE listed;
CREATE INDEX product_metrics_change_xid_idx ON product_metrics (change_xid);
CREATE TRIGGER product_metrics_stamp BEFORE INSERT OR UPDATE ON product_metrics
    FOR EACH ROW EXECUTE FUNCTION product_metrics_stamp();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION products_metrics_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO product_metrics (product_id, listed) VALUES (NEW.id, true)
    ON CONFLICT (product_id) DO UPDATE SET listed = true;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TABLE product_likes;
DROP TABLE product_sales;
DROP TABLE product_views;
