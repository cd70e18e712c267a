package store

import (
	"context"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Like makes user like product. It reports whether the like is new; a
// repeated like changes nothing and emits nothing.
func (s *Store) Like(ctx context.Context, user string, product int64) (changed bool, err error) {
	return s.setLike(ctx, product, func(tx *Tx) (bool, error) {
		res := tx.db.Exec(`INSERT INTO likes (user_id, product_id) VALUES (?, ?) ON CONFLICT DO NOTHING`, user, product)
		if res.Error != nil || res.RowsAffected == 0 {
			return false, res.Error
		}
		return true, tx.AppendEvent(events.LikeCreatedV1{UserID: user, ProductID: product})
	})
}

// Unlike removes user's like of product. It reports whether a like was
// removed; unliking a product that is not liked changes nothing and emits
// nothing.
func (s *Store) Unlike(ctx context.Context, user string, product int64) (changed bool, err error) {
	return s.setLike(ctx, product, func(tx *Tx) (bool, error) {
		res := tx.db.Exec(`DELETE FROM likes WHERE user_id = ? AND product_id = ?`, user, product)
		if res.Error != nil || res.RowsAffected == 0 {
			return false, res.Error
		}
		return true, tx.AppendEvent(events.LikeCanceledV1{UserID: user, ProductID: product})
	})
}

// setLike runs change while holding the product row lock, so that like
// events of one product enter the outbox in the order their changes commit.
func (s *Store) setLike(ctx context.Context, product int64, change func(tx *Tx) (bool, error)) (bool, error) {
	var changed bool
	err := s.InTx(ctx, func(tx *Tx) error {
		if err := tx.lockProduct(product, lockWrite); err != nil {
			return err
		}
		var err error
		changed, err = change(tx)
		return err
	})
	return changed, err
}
