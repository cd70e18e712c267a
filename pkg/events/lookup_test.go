package events_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestLookup: every registered type is found by its name, byte for byte,
// and decodes and names its aggregate as Unmarshal and Marshal do.
func TestLookup(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	evs := []any{
		events.OrderPaidV1{OrderID: 7, PaymentID: 8, Amount: 12, Items: []events.OrderItem{{ProductID: 3, Quantity: 2, UnitPrice: 6}}},
		events.LikeCreatedV1{UserID: "u", ProductID: 3},
		events.LikeCanceledV1{UserID: "u", ProductID: 4},
		events.ProductViewedV1{ProductID: 5},
		events.StockDepletedV1{ProductID: 6},
	}
	found := map[string]bool{}
	for _, ev := range evs {
		rec, err := reg.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		et, ok := reg.Lookup([]byte(rec.Type))
		if !ok {
			t.Fatalf("%s not found", rec.Type)
		}
		found[et.Name()] = true
		got, err := et.Decode(rec.Data)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, got); diff != "" {
			t.Errorf("%s decoded (-marshaled +decoded):\n%s", rec.Type, diff)
		}
		if diff := cmp.Diff(rec, events.Record{Type: et.Name(), AggregateType: et.AggregateType(), AggregateID: et.AggregateID(got), Data: rec.Data}); diff != "" {
			t.Errorf("%s (-Marshal +EventType):\n%s", rec.Type, diff)
		}
		if _, err := et.Decode([]byte(`{"x":1}`)); !errors.Is(err, events.ErrBadData) {
			t.Errorf("%s: unknown member decoded: %v", rec.Type, err)
		}
	}
	if diff := cmp.Diff(reg.Types(), sortedKeys(found)); diff != "" {
		t.Errorf("types looked up (-registered +found):\n%s", diff)
	}
	for _, typ := range []string{"", " loopers.order.paid.v1", "LOOPERS.ORDER.PAID.V1", "loopers.order.refunded.v1"} {
		if _, ok := reg.Lookup([]byte(typ)); ok {
			t.Errorf("Lookup(%q) found a type", typ)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
