package app_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// setHeader replaces (or adds) a record header.
func setHeader(pm *sarama.ProducerMessage, key, value string) *sarama.ProducerMessage {
	for i, h := range pm.Headers {
		if string(h.Key) == key {
			pm.Headers[i].Value = []byte(value)
			return pm
		}
	}
	pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(key), Value: []byte(value)})
	return pm
}

func headerOf(pm *sarama.ProducerMessage, key string) string {
	for _, h := range pm.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestHostileRecordsAreIsolated feeds each hostile record in the middle of
// good records of the same product (so it shares their batch and their key
// run) and checks that it alone reaches the dead-letter topic, permanently,
// while the good records' aggregates come out exact.
func TestHostileRecordsAreIsolated(t *testing.T) {
	t.Parallel()
	type hostile struct {
		name  string
		topic string
		make  func(f *fixture, t *testing.T) *sarama.ProducerMessage
	}
	like := func(f *fixture, t *testing.T, user string) *sarama.ProducerMessage {
		// The registry refuses to encode a bad user id, so the data is
		// written by hand, as a forger would.
		pm := f.message(t, "like-events", f.event(t)(events.LikeCreatedV1{UserID: "placeholder", ProductID: 1}), uuid.NewString())
		pm.Value = sarama.ByteEncoder(fmt.Sprintf(`{"UserID":%q,"ProductID":1}`, user))
		return pm
	}
	order := func(f *fixture, t *testing.T, qty, price, amount int64) *sarama.ProducerMessage {
		pm := f.message(t, "order-events", f.event(t)(events.OrderPaidV1{OrderID: 99, PaymentID: 99, Amount: 1, Items: []events.OrderItem{{ProductID: 1, Quantity: 1, UnitPrice: 1}}}), uuid.NewString())
		pm.Value = sarama.ByteEncoder(fmt.Sprintf(`{"OrderID":99,"PaymentID":99,"Amount":%d,"Items":[{"ProductID":1,"Quantity":%d,"UnitPrice":%d}]}`, amount, qty, price))
		return pm
	}
	view := func(f *fixture, t *testing.T) *sarama.ProducerMessage {
		return f.message(t, "product-events", f.event(t)(events.ProductViewedV1{ProductID: 1}), uuid.NewString())
	}
	cases := []hostile{
		{"like with a 65-byte user id", "like-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage { return like(f, t, strings.Repeat("u", 65)) }},
		{"like with a NUL in the user id", "like-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage { return like(f, t, "a\x00b") }},
		{"like with invalid UTF-8 in the user id", "like-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage { return like(f, t, "a\xffb") }},
		{"like with the largest sequence", "like-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return setHeader(like(f, t, "mallory"), "ce_sequence", fmt.Sprint(int64(math.MaxInt64)))
		}},
		{"like with a sequence beyond any the outbox issued", "like-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return setHeader(like(f, t, "mallory"), "ce_sequence", fmt.Sprint(2*fixtureIssued))
		}},
		{"view whose id is longer than the idempotency key allows", "product-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return setHeader(view(f, t), "ce_id", strings.Repeat("x", 300))
		}},
		{"view whose aggregate is another product", "product-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return setHeader(view(f, t), "ce_aggregateid", "2")
		}},
		{"view larger than the record limit", "product-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			pm := view(f, t)
			pm.Value = sarama.ByteEncoder(`{"ProductID":1,"UserID":"` + strings.Repeat("v", events.MaxRecordBytes) + `"}`)
			return pm
		}},
		{"order whose line overflows int64", "order-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return order(f, t, math.MaxInt64/2, 4, 1)
		}},
		{"order whose amount is not the sum of its lines", "order-events", func(f *fixture, t *testing.T) *sarama.ProducerMessage {
			return order(f, t, 2, 100, 1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has its own topics and database
			ctx := context.Background()
			f := newFixture(t)
			event := f.event(t)
			// Good records of product 1 around the hostile one, all in one
			// partition and one backlog, so they share batches and runs.
			var msgs []*sarama.ProducerMessage
			good := func(i int) *sarama.ProducerMessage {
				switch tc.topic {
				case "like-events":
					return f.message(t, tc.topic, event(events.LikeCreatedV1{UserID: fmt.Sprintf("user%d", i), ProductID: 1}), uuid.NewString())
				case "order-events":
					return f.message(t, tc.topic, event(events.OrderPaidV1{OrderID: int64(i + 1), PaymentID: int64(i + 1), Amount: 100,
						Items: []events.OrderItem{{ProductID: 1, Quantity: 1, UnitPrice: 100}}}), uuid.NewString())
				}
				return view(f, t)
			}
			for i := range 10 {
				msgs = append(msgs, good(i))
			}
			bad := tc.make(f, t)
			msgs = append(msgs, bad)
			for i := 10; i < 20; i++ {
				msgs = append(msgs, good(i))
			}
			if err := f.producer.SendMessages(msgs); err != nil {
				t.Fatal(err)
			}
			_, done, stop := f.start(t, nil)
			conn := f.conn(t)
			want := map[string]int64{"like-events": 20, "order-events": 20, "product-events": 20}[tc.topic]
			column := map[string]string{"like-events": "like_count", "order-events": "sales_count", "product-events": "view_count"}[tc.topic]
			var got int64
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				_ = conn.QueryRow(ctx, `SELECT `+column+` FROM product_metrics WHERE product_id = 1`).Scan(&got)
				if got == want {
					break
				}
			}
			if got != want {
				t.Fatalf("%s of product 1 = %d, want %d: good records were lost or doubled", column, got, want)
			}
			dlt := testenv.ReadTopic(t, f.brokers, f.kafka.Topic(tc.topic+".DLT"), 1, 30*time.Second)
			var ids []string
			for _, r := range dlt {
				h := testenv.Headers(r)
				ids = append(ids, h["ce_id"])
				if h[pcon.HeaderReason] != pcon.ReasonPermanent || h[pcon.HeaderAttempts] != "1" {
					t.Errorf("dead letter reason %q after %s attempts, want a permanent failure on the first", h[pcon.HeaderReason], h[pcon.HeaderAttempts])
				}
			}
			if diff := cmp.Diff([]string{headerOf(bad, "ce_id")}, ids); diff != "" {
				t.Errorf("dead-lettered events (-want +got):\n%s", diff)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDatabaseRefusalIsolated: a record the registry accepts but the
// database refuses as data (SQLSTATE class 22, here from a trigger) fails
// its whole batch; its batch-mates are retried alone and applied, and only
// it reaches the dead-letter topic, without the retries a transient error
// gets.
func TestDatabaseRefusalIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	conn := f.conn(t)
	if _, err := conn.Exec(ctx, `
		CREATE FUNCTION refuse_666() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.product_id = 666 THEN
				RAISE EXCEPTION 'product 666 is out of range' USING ERRCODE = 'numeric_value_out_of_range';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_666 BEFORE INSERT OR UPDATE ON product_views FOR EACH ROW EXECUTE FUNCTION refuse_666();`); err != nil {
		t.Fatal(err)
	}
	event := f.event(t)
	var msgs []*sarama.ProducerMessage
	for i := range 21 {
		product := int64(1)
		if i == 10 {
			product = 666
		}
		msgs = append(msgs, f.message(t, "product-events", event(events.ProductViewedV1{ProductID: product}), uuid.NewString()))
	}
	if err := f.producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	_, done, stop := f.start(t, map[string]string{"PRODUCT_CONSUMERS_GROUPS": "view"})
	var views int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_ = conn.QueryRow(ctx, `SELECT view_count FROM product_metrics WHERE product_id = 1`).Scan(&views)
		if views == 20 {
			break
		}
	}
	if views != 20 {
		t.Fatalf("views of product 1 = %d, want 20", views)
	}
	dlt := testenv.ReadTopic(t, f.brokers, f.kafka.Topic("product-events.DLT"), 1, 30*time.Second)
	h := testenv.Headers(dlt[0])
	if h["ce_id"] != headerOf(msgs[10], "ce_id") || h[pcon.HeaderReason] != pcon.ReasonPermanent {
		t.Errorf("dead letter %s (%s), want the refused view, permanently", h["ce_id"], h[pcon.HeaderReason])
	}
	// At most once with batch-mates and once alone, then it is known to be
	// at fault; a transient error would have used all 3 attempts.
	if a := h[pcon.HeaderAttempts]; a != "1" && a != "2" {
		t.Errorf("the refused view was tried %s times, want 1 (alone in its first batch) or 2", a)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
