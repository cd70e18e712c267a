-- +goose Up

-- Every product has its product_metrics row from the transaction that
-- creates it, so a listing sorted by an aggregate reads one index in order:
-- without it, the products with no row (zero) had to be found by an
-- anti-join over the whole catalogue on every page. A trigger, not the
-- store's insert, so that every writer of products is covered.
-- +goose StatementBegin
CREATE FUNCTION products_metrics_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO product_metrics (product_id) VALUES (NEW.id) ON CONFLICT (product_id) DO NOTHING;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER products_metrics_row AFTER INSERT ON products
    FOR EACH ROW EXECUTE FUNCTION products_metrics_row();

-- The products created before this migration.
INSERT INTO product_metrics (product_id)
SELECT id FROM products ON CONFLICT (product_id) DO NOTHING;

-- +goose Down
DROP TRIGGER products_metrics_row ON products;
DROP FUNCTION products_metrics_row();
