package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/loopers/commerce-pipeline/internal/eventcontract"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

func contract(t *testing.T) *eventcontract.Contract {
	t.Helper()
	c, err := eventcontract.Default()
	if err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	return c
}

// wire is each event type's wire form: a value with every member set, the
// exact bytes Marshal must write, and the bytes the same value had before
// the types had json tags (Go's field names), as they still sit in topics,
// in unpublished outbox rows and in dead letters re-driven later.
var wire = []struct {
	name           string
	ev             any
	current, older string
}{
	{"order paid",
		events.OrderPaidV1{OrderID: 9, PaymentID: 3, Amount: 12500, Items: []events.OrderItem{{ProductID: 1, Quantity: 3, UnitPrice: 1500}, {ProductID: 2, Quantity: 2, UnitPrice: 4000}}},
		`{"orderId":9,"paymentId":3,"amount":12500,"items":[{"productId":1,"quantity":3,"unitPrice":1500},{"productId":2,"quantity":2,"unitPrice":4000}]}`,
		`{"OrderID":9,"PaymentID":3,"Amount":12500,"Items":[{"ProductID":1,"Quantity":3,"UnitPrice":1500},{"ProductID":2,"Quantity":2,"UnitPrice":4000}]}`},
	{"like created", events.LikeCreatedV1{UserID: "alice", ProductID: 227},
		`{"userId":"alice","productId":227}`, `{"UserID":"alice","ProductID":227}`},
	{"like canceled", events.LikeCanceledV1{UserID: "alice", ProductID: 227},
		`{"userId":"alice","productId":227}`, `{"UserID":"alice","ProductID":227}`},
	{"product viewed", events.ProductViewedV1{ProductID: 227, UserID: "alice"},
		`{"productId":227,"userId":"alice"}`, `{"ProductID":227,"UserID":"alice"}`},
	{"product viewed anonymously", events.ProductViewedV1{ProductID: 227},
		`{"productId":227,"userId":""}`, `{"ProductID":227,"UserID":""}`},
	{"stock depleted", events.StockDepletedV1{ProductID: 2}, `{"productId":2}`, `{"ProductID":2}`},
}

// TestWireFormat pins what each event is on the wire: renaming a Go field or
// a tag, or adding or dropping a member, changes the bytes and fails here
// and against the AsyncAPI schema; the value must decode back unchanged.
//
//nolint:paralleltest // the cases fill the coverage map checked after them
func TestWireFormat(t *testing.T) {
	t.Parallel()
	reg, c := events.NewRegistry(), contract(t)
	covered := map[string]bool{}
	for _, tc := range wire {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := reg.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			covered[rec.Type] = true
			if diff := cmp.Diff(tc.current, string(rec.Data)); diff != "" {
				t.Errorf("wire bytes (-want +got):\n%s", diff)
			}
			m, ok := c.Message(rec.Type)
			if !ok {
				t.Fatalf("asyncapi.yaml has no message %s", rec.Type)
			}
			if err := m.CheckPayload(rec.Data); err != nil {
				t.Errorf("against asyncapi.yaml: %v", err)
			}
			back, err := reg.Unmarshal(rec.Type, rec.Data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.ev, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(reg.Types(), slices.Sorted(maps.Keys(covered))); diff != "" {
		t.Errorf("types without a wire case (-registered +covered):\n%s", diff)
	}
}

// TestLegacyPayloads: records written before the json tags must decode to
// the same events (and consumers built before them read the new records). This rests on encoding/json matching member names to
// tags case-insensitively, with unknown members refused: each old name
// differs from its tag in case only.
func TestLegacyPayloads(t *testing.T) {
	t.Parallel()
	reg, c := events.NewRegistry(), contract(t)
	for _, tc := range wire {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The fixture is what the untagged types wrote, byte for byte.
			old, err := json.Marshal(untagged(tc.ev))
			if err != nil {
				t.Fatal(err)
			}
			if string(old) != tc.older {
				t.Fatalf("the untagged form of %T is %s, not the fixture %s", tc.ev, old, tc.older)
			}
			// And the other way, for a rolling deploy: a reader built before
			// the tags reads the new bytes as the same event.
			prev := reflect.New(reflect.TypeOf(untagged(tc.ev)))
			if err := json.Unmarshal([]byte(tc.current), prev.Interface()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(untagged(tc.ev), prev.Elem().Interface()); diff != "" {
				t.Errorf("a reader without tags reads the new bytes differently (-want +got):\n%s", diff)
			}
			rec, err := reg.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reg.Unmarshal(rec.Type, old)
			if err != nil {
				t.Fatalf("old record refused: %v", err)
			}
			if diff := cmp.Diff(tc.ev, got); diff != "" {
				t.Errorf("old record decodes differently (-want +got):\n%s", diff)
			}
			// Through the whole consumer path: a CloudEvent read from Kafka.
			rec.Data = old
			msg, err := reg.FromCloudEvent(readBack(t, reg, rec))
			if err != nil {
				t.Fatalf("old record refused by FromCloudEvent: %v", err)
			}
			if diff := cmp.Diff(tc.ev, msg.Event); diff != "" {
				t.Errorf("old CloudEvent decodes differently (-want +got):\n%s", diff)
			}
			// The document describes what producers write now, only.
			m, _ := c.Message(rec.Type)
			if m.CheckPayload(old) == nil {
				t.Errorf("asyncapi.yaml accepts the old form %s as a payload", old)
			}
		})
	}
}

// TestAsyncAPIDescribesTheRegistry: one channel per topic the
// infrastructure creates, and on each event topic exactly the messages of
// the types published to it, with the registry's aggregate type.
func TestAsyncAPIDescribesTheRegistry(t *testing.T) {
	t.Parallel()
	reg, c := events.NewRegistry(), contract(t)
	if diff := cmp.Diff(reg.AllTopics(), c.Topics()); diff != "" {
		t.Fatalf("channels (-registry +asyncapi.yaml):\n%s", diff)
	}
	for _, topic := range reg.Topics() {
		var want, got []string
		for _, typ := range reg.Types() {
			if tp, _ := events.TopicOf(typ); tp == topic {
				want = append(want, typ)
			}
		}
		for _, m := range c.Messages(topic) {
			got = append(got, m.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s messages (-registry +asyncapi.yaml):\n%s", topic, diff)
		}
		for _, tc := range []struct{ suffix, message string }{{events.DLTSuffix, "dead-letter"}, {events.ParkedSuffix, "parked"}} {
			ms := c.Messages(topic + tc.suffix)
			if len(ms) != 1 || ms[0].Name != tc.message {
				t.Errorf("%s%s: want the one message %q", topic, tc.suffix, tc.message)
			}
		}
	}
}

// TestAsyncAPIExamples: every example of the document is a record the
// consumers accept, and its old form (x-legacy-payload) decodes to the same
// event.
func TestAsyncAPIExamples(t *testing.T) {
	t.Parallel()
	reg, c := events.NewRegistry(), contract(t)
	for _, typ := range reg.Types() {
		m, ok := c.Message(typ)
		if !ok {
			t.Errorf("no message %s", typ)
			continue
		}
		if len(m.Examples) == 0 || m.LegacyPayload == nil {
			t.Errorf("%s: want examples and an x-legacy-payload", typ)
			continue
		}
		for _, ex := range m.Examples {
			t.Run(typ+"/"+ex.Name, func(t *testing.T) {
				t.Parallel()
				if err := m.CheckPayload(ex.Payload); err != nil {
					t.Fatal(err)
				}
				want, err := reg.Unmarshal(typ, ex.Payload)
				if err != nil {
					t.Fatalf("example payload refused: %v", err)
				}
				if ex.Name == m.Examples[0].Name {
					older, err := reg.Unmarshal(typ, m.LegacyPayload)
					if err != nil {
						t.Fatalf("x-legacy-payload refused: %v", err)
					}
					if diff := cmp.Diff(want, older); diff != "" {
						t.Errorf("x-legacy-payload is another event (-example +legacy):\n%s", diff)
					}
				}
				if ex.Headers == nil {
					return
				}
				if err := m.CheckHeaders(ex.Headers); err != nil {
					t.Fatal(err)
				}
				cm := &sarama.ConsumerMessage{Topic: "x", Key: []byte(ex.Headers["ce_aggregateid"]), Value: ex.Payload}
				for k, v := range ex.Headers {
					cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
				}
				ce, err := binding.ToEvent(context.Background(), kafka_sarama.NewMessageFromConsumerMessage(cm))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := reg.FromCloudEvent(*ce); err != nil {
					t.Fatalf("example record refused: %v", err)
				}
			})
		}
	}
}

// TestSchemasAgreeWithTheDecoder: the schemas' bounds are the decoder's.
// Each payload is either accepted by both or refused by both. (The decoder
// is more lenient in two ways only: a member name's case, above, and a
// missing member whose zero value is valid, such as an anonymous view's
// userId; and it checks what JSON Schema cannot say, an order's amount
// against its lines.)
func TestSchemasAgreeWithTheDecoder(t *testing.T) {
	t.Parallel()
	reg, c := events.NewRegistry(), contract(t)
	const (
		like  = "loopers.like.created.v1"
		view  = "loopers.product.viewed.v1"
		order = "loopers.order.paid.v1"
		stock = "loopers.stock.depleted.v1"
	)
	line := func(q, p string) string {
		return `{"orderId":1,"paymentId":1,"amount":` + mul(q, p) + `,"items":[{"productId":1,"quantity":` + q + `,"unitPrice":` + p + `}]}`
	}
	lines := func(n int) string {
		items := strings.TrimSuffix(strings.Repeat(`{"productId":1,"quantity":1,"unitPrice":1},`, n), ",")
		return `{"orderId":1,"paymentId":1,"amount":` + itoa(n) + `,"items":[` + items + `]}`
	}
	tests := []struct {
		name, typ, data string
		valid           bool
	}{
		{"like", like, `{"userId":"alice","productId":1}`, true},
		{"user id of 64 bytes", like, `{"userId":"` + strings.Repeat("u", 64) + `","productId":1}`, true},
		{"user id of every symbol", like, `{"userId":"a.b_c-d@e+f:G9","productId":1}`, true},
		{"largest product id", like, `{"userId":"a","productId":9223372036854775807}`, true},
		{"anonymous view", view, `{"productId":1,"userId":""}`, true},
		{"free line", order, line("1", "0"), true},
		{"largest line", order, line("10000", "1000000000"), true},
		{"most lines", order, lines(100), true},
		{"stock", stock, `{"productId":3}`, true},

		{"empty user id", like, `{"userId":"","productId":1}`, false},
		{"user id of 65 bytes", like, `{"userId":"` + strings.Repeat("u", 65) + `","productId":1}`, false},
		{"user id with a space", like, `{"userId":"a b","productId":1}`, false},
		{"user id not ASCII", like, `{"userId":"사용자","productId":1}`, false},
		{"view by a bad user id", view, `{"productId":1,"userId":"a/b"}`, false},
		{"product id zero", like, `{"userId":"a","productId":0}`, false},
		{"product id negative", stock, `{"productId":-1}`, false},
		{"product id past int64", stock, `{"productId":9223372036854775808}`, false},
		{"product id fractional", stock, `{"productId":1.5}`, false},
		{"product id a string", like, `{"userId":"a","productId":"1"}`, false},
		{"missing product", like, `{"userId":"a"}`, false},
		{"snake case members", like, `{"user_id":"a","product_id":1}`, false},
		{"unknown member", like, `{"userId":"a","productId":1,"via":"ad"}`, false},
		{"misspelled unit price", order, `{"orderId":1,"paymentId":1,"amount":0,"items":[{"productId":1,"quantity":2,"unit_price":3}]}`, false},
		{"quantity zero", order, line("0", "1"), false},
		{"quantity above the bound", order, line("10001", "1"), false},
		{"price above the bound", order, line("1", "1000000001"), false},
		{"negative price", order, line("1", "-1"), false},
		{"no lines", order, `{"orderId":1,"paymentId":1,"amount":0,"items":[]}`, false},
		{"too many lines", order, lines(101), false},
		{"order id zero", order, `{"orderId":0,"paymentId":1,"amount":1,"items":[{"productId":1,"quantity":1,"unitPrice":1}]}`, false},
		{"not an object", stock, `[1]`, false},
		{"trailing data", stock, `{"productId":3} {}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, ok := c.Message(tc.typ)
			if !ok {
				t.Fatalf("no message %s", tc.typ)
			}
			schemaErr := m.CheckPayload([]byte(tc.data))
			_, decErr := reg.Unmarshal(tc.typ, []byte(tc.data))
			if (schemaErr == nil) != tc.valid || (decErr == nil) != tc.valid {
				t.Fatalf("want valid=%v; asyncapi.yaml says %v, the decoder %v", tc.valid, schemaErr, decErr)
			}
			if decErr != nil && !errors.Is(decErr, events.ErrBadData) {
				t.Fatalf("decoder error %v is not ErrBadData", decErr)
			}
		})
	}
}

// TestPayloadSchemasAreClosed: every member of a payload schema is required
// and no other is allowed, so a record that lacks one, or has one more,
// fails the contract checks (here and in the end-to-end suite).
func TestPayloadSchemasAreClosed(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Type                 string         `yaml:"type"`
				Required             []string       `yaml:"required"`
				Properties           map[string]any `yaml:"properties"`
				AdditionalProperties *bool          `yaml:"additionalProperties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(events.AsyncAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	reg := events.NewRegistry()
	payloads := []string{"OrderItem"}
	for _, typ := range reg.Types() {
		payloads = append(payloads, goName(t, reg, typ))
	}
	for _, name := range payloads {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("components.schemas has no %s", name)
			continue
		}
		if s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: want an object with additionalProperties: false", name)
		}
		if diff := cmp.Diff(slices.Sorted(maps.Keys(s.Properties)), slices.Sorted(slices.Values(s.Required))); diff != "" {
			t.Errorf("%s: properties that are not required (-properties +required):\n%s", name, diff)
		}
	}
}

// TestAsyncAPIIsACopy: callers cannot change the document others get.
func TestAsyncAPIIsACopy(t *testing.T) {
	t.Parallel()
	doc := events.AsyncAPI()
	doc[0] = 'X'
	if events.AsyncAPI()[0] == 'X' {
		t.Fatal("AsyncAPI returned the embedded document itself")
	}
}

// goName returns the Go type name of an event type, which names its schema.
func goName(t *testing.T, reg *events.Registry, typ string) string {
	t.Helper()
	for _, tc := range wire {
		if rec, err := reg.Marshal(tc.ev); err == nil && rec.Type == typ {
			return reflect.TypeOf(tc.ev).Name()
		}
	}
	t.Fatalf("no wire case of %s", typ)
	return ""
}

// readBack writes rec as the relay does (binary mode through the Kafka
// binding) and reads it as the consumers do.
func readBack(t *testing.T, reg *events.Registry, rec events.Record) cloudevents.Event {
	t.Helper()
	ce, err := reg.ToCloudEvent(events.Envelope{ID: goodID, Source: "commerce-api", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Sequence: 1, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	back, err := binding.ToEvent(context.Background(), kafka_sarama.NewMessageFromConsumerMessage(throughKafka(t, ce)))
	if err != nil {
		t.Fatal(err)
	}
	return *back
}

// untagged copies v into an equal value of a type without struct tags (the
// event types as they were before they had them), recursively.
func untagged(v any) any { return untaggedValue(reflect.ValueOf(v)).Interface() }

func untaggedValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Struct:
		fields := make([]reflect.StructField, v.NumField())
		vals := make([]reflect.Value, v.NumField())
		for i := range fields {
			vals[i] = untaggedValue(v.Field(i))
			fields[i] = reflect.StructField{Name: v.Type().Field(i).Name, Type: vals[i].Type()}
		}
		out := reflect.New(reflect.StructOf(fields)).Elem()
		for i, fv := range vals {
			out.Field(i).Set(fv)
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return v
		}
		first := untaggedValue(v.Index(0))
		out := reflect.MakeSlice(reflect.SliceOf(first.Type()), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(untaggedValue(v.Index(i)))
		}
		return out
	}
	return v
}

func itoa(n int) string { return strconv.Itoa(n) }

// mul multiplies two decimal integers.
func mul(a, b string) string {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return strconv.FormatInt(x*y, 10)
}
