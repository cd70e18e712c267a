package events_test

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

const goodID = "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a"

// hostile builds a CloudEvent by hand, as a forger would, bypassing Marshal.
type hostile struct {
	id, typ, aggType, aggID, seq, data string
}

func (h hostile) event(t *testing.T) cloudevents.Event {
	t.Helper()
	ce := cloudevents.NewEvent()
	ce.SetID(h.id)
	ce.SetType(h.typ)
	ce.SetSource("commerce-api")
	ce.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ce.SetExtension(events.ExtAggregateType, h.aggType)
	ce.SetExtension(events.ExtAggregateID, h.aggID)
	ce.SetExtension(events.ExtSequence, h.seq)
	ce.SetDataContentType(cloudevents.ApplicationJSON)
	ce.DataEncoded = []byte(h.data)
	return ce
}

// like and order are well-formed events that each case below changes in
// one way.
func like(user string) hostile {
	return hostile{goodID, "loopers.like.created.v1", "Product", "7", "42", `{"userId":` + jsonString(user) + `,"productId":7}`}
}

func order(amount int64, items string) hostile {
	return hostile{goodID, "loopers.order.paid.v1", "Order", "9", "42",
		`{"orderId":9,"paymentId":3,"amount":` + strconv.FormatInt(amount, 10) + `,"items":[` + items + `]}`}
}

// jsonString encodes s as encoding/json does: control characters escaped,
// invalid UTF-8 replaced by U+FFFD (as a producer in Go would send it).
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func with(h hostile, f func(*hostile)) hostile { f(&h); return h }

// TestFromCloudEventBounds feeds records a forger could write to Kafka;
// each must fail decoding with the permanent bad-data error, so consumers
// dead-letter it at once instead of retrying its batch.
func TestFromCloudEventBounds(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	maxLine := `{"productId":1,"quantity":10000,"unitPrice":1000000000}`
	tests := []struct {
		name string
		in   hostile
	}{
		{"user id of 65 bytes", like(strings.Repeat("u", 65))},
		{"user id with NUL", like("a\x00b")},
		{"user id with invalid UTF-8", like("\xff")},
		{"user id with a space", like("a b")},
		{"user id with non-ASCII", like("사용자")},
		{"view by an invalid user", hostile{goodID, "loopers.product.viewed.v1", "Product", "7", "1", `{"productId":7,"userId":"a\u0000"}`}},
		{"quantity above the API's limit", order(10001, `{"productId":1,"quantity":10001,"unitPrice":1}`)},
		{"price above the API's limit", order(1000000001, `{"productId":1,"quantity":1,"unitPrice":1000000001}`)},
		{"quantity times price overflows", order(0, `{"productId":1,"quantity":9223372036854775807,"unitPrice":2}`)},
		{"amount not the sum of the lines", order(5, `{"productId":1,"quantity":2,"unitPrice":3}`)},
		{"too many lines", order(101*10_000*1_000_000_000, strings.TrimSuffix(strings.Repeat(maxLine+",", 101), ","))},
		{"id not a UUID", with(like("u1"), func(h *hostile) { h.id = "id-1" })},
		{"id longer than a UUID", with(like("u1"), func(h *hostile) { h.id = goodID + strings.Repeat("x", 300) })},
		{"id a UUID in braces", with(like("u1"), func(h *hostile) { h.id = "{" + goodID + "}" })},
		{"aggregateid not the payload's product", with(like("u1"), func(h *hostile) { h.aggID = "8" })},
		{"aggregateid with a leading zero", with(like("u1"), func(h *hostile) { h.aggID = "07" })},
		{"aggregatetype not the type's", with(like("u1"), func(h *hostile) { h.aggType = "Order" })},
		{"sequence MaxInt64", with(like("u1"), func(h *hostile) { h.seq = strconv.FormatInt(math.MaxInt64, 10) })},
		{"sequence above the bound", with(like("u1"), func(h *hostile) { h.seq = strconv.FormatInt(events.MaxSequence+1, 10) })},
		{"sequence with a plus sign", with(like("u1"), func(h *hostile) { h.seq = "+5" })},
		{"sequence with a leading zero", with(like("u1"), func(h *hostile) { h.seq = "05" })},
		{"data above the record limit", with(like("u1"), func(h *hostile) {
			h.data = `{"userId":"u1","productId":7,"pad":"` + strings.Repeat("x", events.MaxRecordBytes) + `"}`
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := reg.FromCloudEvent(tc.in.event(t))
			if !errors.Is(err, events.ErrBadData) || !errors.Is(err, events.ErrUnprocessable) {
				t.Fatalf("FromCloudEvent error = %v, want ErrBadData (permanent)", err)
			}
		})
	}

	// The limits themselves are accepted: the bounds are inclusive.
	for name, in := range map[string]hostile{
		"user id of 64 bytes":      like(strings.Repeat("u", 64)),
		"user id of every symbol":  like("a.b_c-d@e+f:G9"),
		"largest line":             order(10_000*1_000_000_000, maxLine),
		"sequence at the bound":    with(like("u1"), func(h *hostile) { h.seq = strconv.FormatInt(events.MaxSequence, 10) }),
		"anonymous view":           {goodID, "loopers.product.viewed.v1", "Product", "7", "1", `{"productId":7,"userId":""}`},
		"free order (price zero)":  order(0, `{"productId":1,"quantity":3,"unitPrice":0}`),
		"most lines at most price": order(100*10_000*1_000_000_000, strings.TrimSuffix(strings.Repeat(maxLine+",", 100), ",")),
	} {
		t.Run("accepts "+name, func(t *testing.T) {
			t.Parallel()
			if _, err := reg.FromCloudEvent(in.event(t)); err != nil {
				t.Fatalf("FromCloudEvent: %v", err)
			}
		})
	}
}

func TestValidateUserID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"alice": true, "user-12": true, "a.b_c-d@e+f:G9": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "a b": false, "a\x00": false, "\xff": false,
		"é": false, "a/b": false, "a\tb": false, " a": false,
	} {
		if got := events.ValidateUserID(id) == nil; got != want {
			t.Errorf("ValidateUserID(%q) ok = %v, want %v", id, got, want)
		}
	}
}

// FuzzFromCloudEvent builds events from arbitrary attributes and data: the
// decoder must never panic, and whatever it accepts must be within bounds
// and name the payload's own aggregate.
func FuzzFromCloudEvent(f *testing.F) {
	reg := events.NewRegistry()
	f.Add(goodID, "loopers.like.created.v1", "Product", "7", "42", []byte(`{"userId":"u1","productId":7}`))
	f.Add(goodID, "loopers.like.canceled.v1", "Product", "7", "43", []byte(`{"UserID":"u1","ProductID":7}`)) // written before the json tags
	f.Add(goodID, "loopers.order.paid.v1", "Order", "9", "1", []byte(`{"orderId":9,"paymentId":3,"amount":6,"items":[{"productId":1,"quantity":2,"unitPrice":3}]}`))
	f.Add("x", "loopers.stock.depleted.v1", "Product", "1", "9223372036854775807", []byte(`{"productId":1}`))
	f.Fuzz(func(t *testing.T, id, typ, aggType, aggID, seq string, data []byte) {
		ce := hostile{id, typ, aggType, aggID, seq, string(data)}.event(t)
		m, err := reg.FromCloudEvent(ce)
		if err != nil {
			if !errors.Is(err, events.ErrUnprocessable) {
				t.Fatalf("decode error %v is not permanent", err)
			}
			return
		}
		rec, err := reg.Marshal(m.Event)
		if err != nil || rec.AggregateID != m.AggregateID || rec.AggregateType != m.AggregateType {
			t.Fatalf("accepted %+v whose aggregate is %+v (%v)", m, rec, err)
		}
		if m.Sequence <= 0 || m.Sequence > events.MaxSequence {
			t.Fatalf("accepted sequence %d", m.Sequence)
		}
	})
}
