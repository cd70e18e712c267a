package store

import (
	"context"
	"fmt"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Like makes user like product. It reports whether the like is new; a
// repeated like changes nothing and emits nothing.
func (s *Store) Like(ctx context.Context, user string, product int64) (changed bool, err error) {
	// One statement: the like and its event commit together, in one round
	// trip. The foreign key refuses a product that does not exist.
	changed, err = s.changeWithEvent(ctx, `INSERT INTO likes (user_id, product_id) VALUES ($1, $2)
		ON CONFLICT DO NOTHING RETURNING 1`, []any{user, product}, events.LikeCreatedV1{UserID: user, ProductID: product})
	if pg.Code(err) == pg.CodeForeignKeyViolation {
		return false, productFound(product, 0, nil)
	}
	if err != nil {
		return false, fmt.Errorf("like product %d: %w", product, mapErr(err))
	}
	return changed, nil
}

// Unlike removes user's like of product. It reports whether a like was
// removed; unliking a product that is not liked changes nothing and emits
// nothing.
func (s *Store) Unlike(ctx context.Context, user string, product int64) (changed bool, err error) {
	changed, err = s.changeWithEvent(ctx, `DELETE FROM likes WHERE user_id = $1 AND product_id = $2 RETURNING 1`,
		[]any{user, product}, events.LikeCanceledV1{UserID: user, ProductID: product})
	if err != nil {
		return false, fmt.Errorf("unlike product %d: %w", product, mapErr(err))
	}
	if !changed {
		// Nothing to cancel, or no such product: a 404 for the latter.
		return false, s.InTx(ctx, func(tx *Tx) error { return tx.productExists(product) })
	}
	return true, nil
}
