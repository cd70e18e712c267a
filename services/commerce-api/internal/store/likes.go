package store

import (
	"context"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Like makes user like product. It reports whether the like is new; a
// repeated like changes nothing and emits nothing.
func (s *Store) Like(ctx context.Context, user string, product int64) (changed bool, err error) {
	err = s.InTx(ctx, func(tx *Tx) error {
		res := tx.db.Exec(`INSERT INTO likes (user_id, product_id) VALUES (?, ?) ON CONFLICT DO NOTHING`, user, product)
		if pg.Code(res.Error) == pg.CodeForeignKeyViolation {
			return productFound(product, 0, nil) // the foreign key refused it
		}
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		changed = true
		return tx.AppendEvent(events.LikeCreatedV1{UserID: user, ProductID: product})
	})
	return changed, err
}

// Unlike removes user's like of product. It reports whether a like was
// removed; unliking a product that is not liked changes nothing and emits
// nothing.
func (s *Store) Unlike(ctx context.Context, user string, product int64) (changed bool, err error) {
	err = s.InTx(ctx, func(tx *Tx) error {
		res := tx.db.Exec(`DELETE FROM likes WHERE user_id = ? AND product_id = ?`, user, product)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return tx.productExists(product) // a 404 for no such product, else nothing to do
		}
		changed = true
		return tx.AppendEvent(events.LikeCanceledV1{UserID: user, ProductID: product})
	})
	return changed, err
}
