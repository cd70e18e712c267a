// Package store applies consumed events to the product aggregates. It is the
// only package of product-consumers that talks to PostgreSQL, and every method
// makes its effect exactly once however often the same event arrives.
package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/pg"
)

// Errors the database may answer with, for callers to tell a refusal of the
// data (never worth retrying) from an outage.
var (
	ErrInvalidInput = pg.ErrInvalidInput // SQLSTATE class 22
	ErrConstraint   = pg.ErrConstraint   // SQLSTATE class 23, but for uniqueness
	ErrUnavailable  = pg.ErrUnavailable
)

// Store applies aggregate changes in PostgreSQL.
type Store struct {
	db *pg.DB
}

// Open connects to databaseURL with o and checks that it answers.
func Open(ctx context.Context, databaseURL string, o pg.Options) (*Store, error) {
	db, err := pg.Open(ctx, databaseURL, o)
	if err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// IssuedSequence returns the highest outbox id drawn so far: no legitimate
// event's sequence (its first outbox id) is above it.
func (s *Store) IssuedSequence(ctx context.Context) (int64, error) {
	var last int64
	if err := s.db.Pool.QueryRow(ctx, `SELECT last_value FROM outbox_id_seq`).Scan(&last); err != nil {
		return 0, fmt.Errorf("read the outbox's last id: %w", pg.MapErr(err))
	}
	return last, nil
}

// Close releases the connections.
func (s *Store) Close() { s.db.Close() }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

// Sale is one product line of a paid order.
type Sale struct {
	ProductID int64
	Quantity  int64
	Amount    int64 // quantity × unit price
}

// ApplyOrderPaid adds an order's sales to product_sales unless the event
// with this idempotency key was already handled; the idempotency record and
// the sales commit together. It reports whether the sales were applied.
//
// One statement does it all, so it costs one round trip and is its own
// transaction: the sales are written only when the idempotency record was
// new (a concurrent redelivery waits on the record's unique key and then
// writes nothing).
func (s *Store) ApplyOrderPaid(ctx context.Context, idempotencyKey string, sales []Sale) (applied bool, err error) {
	byProduct := map[int64]Sale{}
	for _, sl := range sales {
		t := byProduct[sl.ProductID]
		byProduct[sl.ProductID] = Sale{ProductID: sl.ProductID, Quantity: t.Quantity + sl.Quantity, Amount: t.Amount + sl.Amount}
	}
	merged := sortedValues(byProduct, func(s Sale) int64 { return s.ProductID })
	ids, qty, amount := make([]int64, len(merged)), make([]int64, len(merged)), make([]int64, len(merged))
	for i, sl := range merged {
		ids[i], qty[i], amount[i] = sl.ProductID, sl.Quantity, sl.Amount
	}
	var n int
	err = s.db.Pool.QueryRow(ctx, `
		WITH handled AS (
			INSERT INTO event_handled (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1
		), sales AS (
			INSERT INTO product_sales AS m (product_id, sales_count, sales_amount)
			SELECT u.id, u.qty, u.amount FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS u(id, qty, amount)
			WHERE EXISTS (SELECT 1 FROM handled)
			ORDER BY u.id
			ON CONFLICT (product_id) DO UPDATE
			SET sales_count = m.sales_count + EXCLUDED.sales_count,
			    sales_amount = m.sales_amount + EXCLUDED.sales_amount,
			    updated_at = now()
		)
		SELECT count(*) FROM handled`, idempotencyKey, ids, qty, amount).Scan(&n)
	if err != nil {
		return false, pg.MapErr(err)
	}
	return n == 1, nil
}

// View is one product view event.
type View struct {
	IdempotencyKey string
	ProductID      int64
}

// ApplyViews records a batch of views in one transaction: it inserts the
// idempotency records and adds to view_count only the views whose record was
// new. It returns how many views were applied. One statement does it all:
// one round trip, its own transaction.
func (s *Store) ApplyViews(ctx context.Context, views []View) (applied int, err error) {
	seen := make(map[string]bool, len(views))
	keys := make([]string, 0, len(views))
	products := make([]int64, 0, len(views))
	for _, v := range views {
		if !seen[v.IdempotencyKey] {
			seen[v.IdempotencyKey] = true
			keys, products = append(keys, v.IdempotencyKey), append(products, v.ProductID)
		}
	}
	err = s.db.Pool.QueryRow(ctx, `
		WITH input AS (
			SELECT * FROM unnest($1::text[], $2::bigint[]) AS t(idempotency_key, product_id)
		), fresh AS (
			INSERT INTO event_handled (idempotency_key) SELECT idempotency_key FROM input
			ON CONFLICT DO NOTHING RETURNING idempotency_key
		), counts AS (
			SELECT i.product_id, count(*) AS n FROM fresh f JOIN input i USING (idempotency_key)
			GROUP BY i.product_id
		), views AS (
			`+addTo(viewCount, `SELECT product_id, n FROM counts`)+`
		)
		SELECT count(*) FROM fresh`, keys, products).Scan(&applied)
	if err != nil {
		return 0, pg.MapErr(err)
	}
	return applied, nil
}

// LikeChange is a like (Liked) or cancel (!Liked) of a product by a user,
// with the event's sequence, which orders the changes of one product.
type LikeChange struct {
	UserID    string
	ProductID int64
	Liked     bool
	Sequence  int64
}

// ApplyLikes moves the like state of each (user, product) to the newest change
// by sequence and adjusts like_count by the real state transitions only, in
// one transaction. A change not newer than the stored state (a redelivery or
// a reordered event) changes nothing. Within the batch only the newest change
// per (user, product) counts.
//
// The products' locks, the state and the counts go to the server in one
// batch: one round trip, one implicit transaction (a failure anywhere rolls
// all of it back).
func (s *Store) ApplyLikes(ctx context.Context, changes []LikeChange) (res LikesApplied, err error) {
	type userProduct struct {
		user    string
		product int64
	}
	last := map[userProduct]LikeChange{}
	for _, c := range changes {
		k := userProduct{c.UserID, c.ProductID}
		if prev, ok := last[k]; !ok || c.Sequence > prev.Sequence {
			last[k] = c
		}
	}
	newest := make([]LikeChange, 0, len(last))
	for _, c := range last {
		newest = append(newest, c)
	}
	slices.SortFunc(newest, func(a, b LikeChange) int {
		return cmp.Or(cmp.Compare(a.ProductID, b.ProductID), cmp.Compare(a.UserID, b.UserID))
	})
	users, products, liked, seqs := make([]string, len(newest)), make([]int64, len(newest)), make([]bool, len(newest)), make([]int64, len(newest))
	for i, c := range newest {
		users[i], products[i], liked[i], seqs[i] = c.UserID, c.ProductID, c.Liked, c.Sequence
	}
	productIDs := slices.Compact(slices.Clone(products))
	b := &pgx.Batch{}
	// While partitions move between group members, two members can briefly
	// handle the same product. Serialising per product makes the state read
	// below the one the update replaces, including for rows not yet there
	// (which a row lock cannot cover). Sorted ids cannot deadlock.
	b.Queue(`SELECT pg_advisory_xact_lock($2::int4, id::int4) FROM unnest($1::bigint[]) AS id`, hashIDs(productIDs), int32(pg.LikeStateLock))
	b.Queue(`
		WITH input AS (
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::bool[], $4::bigint[])
				AS t(user_id, product_id, liked, sequence)
		), old AS (
			SELECT s.user_id, s.product_id, s.liked
			FROM product_like_state s JOIN input i USING (user_id, product_id)
		), up AS (
			INSERT INTO product_like_state AS s (user_id, product_id, liked, sequence)
			SELECT user_id, product_id, liked, sequence FROM input
			ON CONFLICT (user_id, product_id) DO UPDATE
			SET liked = EXCLUDED.liked, sequence = EXCLUDED.sequence, updated_at = now()
			WHERE s.sequence < EXCLUDED.sequence
			RETURNING s.user_id, s.product_id, s.liked
		), moved AS (
			SELECT up.product_id,
			       sum(CASE WHEN up.liked = coalesce(old.liked, false) THEN 0
			                WHEN up.liked THEN 1 ELSE -1 END)::bigint AS delta,
			       count(*) FILTER (WHERE up.liked <> coalesce(old.liked, false)) AS transitions
			FROM up LEFT JOIN old USING (user_id, product_id)
			GROUP BY up.product_id
		), likes AS (
			`+addTo(likeCount, `SELECT product_id, delta FROM moved WHERE delta <> 0`)+`
		)
		SELECT product_id, delta, transitions FROM moved ORDER BY product_id`, users, products, liked, seqs)
	// The outbox's last issued id, read in the same round trip, lets the
	// caller check the next batch's sequences without asking again.
	b.Queue(`SELECT last_value FROM outbox_id_seq`)
	res = LikesApplied{Delta: map[int64]int64{}}
	br := s.db.Pool.SendBatch(ctx, b)
	err = func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		type change struct {
			Product, Delta, Transitions int64
		}
		moved, err := pgx.CollectRows(rows, pgx.RowToStructByPos[change])
		if err != nil {
			return err
		}
		for _, m := range moved {
			res.Transitions += int(m.Transitions)
			if m.Delta != 0 {
				res.Delta[m.Product] = m.Delta
			}
		}
		return br.QueryRow().Scan(&res.Issued)
	}()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return LikesApplied{}, pg.MapErr(err)
	}
	return res, nil
}

// LikesApplied is what ApplyLikes changed.
type LikesApplied struct {
	Delta       map[int64]int64 // like_count change per product, zero changes left out
	Transitions int             // (user, product) states that flipped
	Issued      int64           // the outbox's last issued id, read in the same transaction
}

// PurgeHandled deletes idempotency records older than maxAge, chunk rows per
// statement. It returns how many it deleted.
func (s *Store) PurgeHandled(ctx context.Context, maxAge time.Duration, chunk int) (int64, error) {
	n, err := s.db.Purge(ctx, `
		DELETE FROM event_handled WHERE id IN (
			SELECT id FROM event_handled WHERE created_at < now() - $1::interval LIMIT $2)`,
		chunk, maxAge)
	if err != nil {
		return n, fmt.Errorf("purge event_handled: %w", err)
	}
	return n, nil
}

// counter is an aggregate that addTo may add to: its table, written by
// one consumer only (so that no two consumer groups wait on one row lock of
// a hot product), and its column.
type counter struct{ table, column string }

var (
	viewCount = counter{"product_views", "view_count"}
	likeCount = counter{"product_likes", "like_count"}
)

// addTo is the upsert that adds to c the (product_id, n) rows of the query
// rows, creating missing rows. Rows are upserted in product id order, so
// concurrent writers of the table cannot deadlock.
func addTo(c counter, rows string) string {
	return `INSERT INTO ` + c.table + ` AS m (product_id, ` + c.column + `)
			SELECT * FROM (` + rows + `) AS r ORDER BY 1
			ON CONFLICT (product_id) DO UPDATE
			SET ` + c.column + ` = m.` + c.column + ` + EXCLUDED.` + c.column + `, updated_at = now()`
}

// hashIDs folds product ids into the int4 space of two-key advisory locks,
// keeping them sorted and distinct.
func hashIDs(ids []int64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(int32(uint32(id) ^ uint32(id>>32)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedValues[K comparable, V any](m map[K]V, key func(V) int64) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b V) int { return cmp.Compare(key(a), key(b)) })
	return out
}
