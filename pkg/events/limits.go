package events

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
)

// Bounds of event payloads. commerce-api refuses requests outside them and
// the registry refuses to decode events outside them, so a forged or corrupt
// record cannot reach an aggregate: with these bounds no order amount,
// sales count or sales amount a consumer adds up can come near int64's range.
const (
	// MaxUserIDBytes is the longest user id, in bytes (the likes and like
	// state columns are VARCHAR(64)).
	MaxUserIDBytes = 64
	// MaxQuantity is the most units of one product in one order line.
	MaxQuantity = 10_000
	// MaxUnitPrice is the highest product price (KRW).
	MaxUnitPrice = 1_000_000_000
	// MaxOrderItems is the most lines one order may have.
	MaxOrderItems = 100
	// MaxSequence bounds the sequence extension. Sequences are outbox ids,
	// drawn one per event from a BIGINT sequence; 2^53 of them (one million
	// events a second for 285 years) is more than an outbox can issue, and a
	// forged sequence near MaxInt64 would otherwise put every later change
	// of a like state "in the past" forever.
	MaxSequence = 1 << 53
	// MaxRecordBytes bounds a record's value (the event data). The largest
	// legitimate event, an order of MaxOrderItems lines, is about 7 KiB;
	// consumers may refuse larger records before decoding them.
	MaxRecordBytes = 64 << 10
)

// ErrInvalidUserID is returned by [ValidateUserID]; it says what a user id
// may contain.
var ErrInvalidUserID = errors.New("a user id must be 1 to 64 bytes of ASCII letters, digits and the symbols . _ - @ + : only")

// ValidateUserID reports whether id is a valid user id: 1 to
// [MaxUserIDBytes] bytes, each an ASCII letter, digit, or one of
// '.', '_', '-', '@', '+', ':'. The rule is the API's (the X-User-ID header)
// and the consumers' (like and view events): ASCII only, so the id is valid
// UTF-8 and fits the database columns byte for byte, and no character that
// needs quoting in logs, metrics or keys.
func ValidateUserID(id string) error {
	if id == "" || len(id) > MaxUserIDBytes {
		return ErrInvalidUserID
	}
	for i := 0; i < len(id); i++ {
		if !userIDByte(id[i]) {
			return ErrInvalidUserID
		}
	}
	return nil
}

func userIDByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '-', '@', '+', ':':
		return true
	}
	return false
}

// validateOrder checks an order's bounds and that its amount is the sum of
// its lines, computed without overflow.
func validateOrder(e OrderPaidV1) error {
	if e.OrderID <= 0 || e.PaymentID <= 0 {
		return errors.New("want positive orderId and paymentId")
	}
	if len(e.Items) == 0 || len(e.Items) > MaxOrderItems {
		return fmt.Errorf("want 1 to %d items, got %d", MaxOrderItems, len(e.Items))
	}
	var sum int64
	for i, it := range e.Items {
		if err := positive("productId", it.ProductID); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if it.Quantity <= 0 || it.Quantity > MaxQuantity {
			return fmt.Errorf("item %d: want quantity 1 to %d, got %d", i, MaxQuantity, it.Quantity)
		}
		if it.UnitPrice < 0 || it.UnitPrice > MaxUnitPrice {
			return fmt.Errorf("item %d: want unitPrice 0 to %d, got %d", i, MaxUnitPrice, it.UnitPrice)
		}
		line, ok := mulAdd(sum, it.Quantity, it.UnitPrice)
		if !ok {
			return fmt.Errorf("item %d: the order amount overflows", i)
		}
		sum = line
	}
	if e.Amount != sum {
		return fmt.Errorf("want amount %d, the sum of the items, got %d", sum, e.Amount)
	}
	return nil
}

// mulAdd returns acc + a*b for non-negative operands, and false when the
// result does not fit an int64.
func mulAdd(acc, a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	s := acc + int64(lo)
	if s < acc {
		return 0, false
	}
	return s, true
}

func userProduct(user string, product int64) error {
	if err := ValidateUserID(user); err != nil {
		return fmt.Errorf("userId %q: %w", user, err)
	}
	return positive("productId", product)
}

// viewer checks a view: the user is optional (anonymous views) but, when
// present, follows the user id rule.
func viewer(user string, product int64) error {
	if user == "" {
		return positive("productId", product)
	}
	return userProduct(user, product)
}

func positive(name string, id int64) error {
	if id <= 0 {
		return fmt.Errorf("want a positive %s, got %s", name, strconv.FormatInt(id, 10))
	}
	return nil
}
