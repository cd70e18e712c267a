package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

const testID = "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a"

// testTime has every digit of a nanosecond fraction.
var testTime = time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)

// relayRecord is env as the relay writes it: the registry's CloudEvent
// through the SDK's Kafka binding in binary mode (the relay's own writer is
// held to these bytes by its tests).
func relayRecord(t testing.TB, reg *events.Registry, env events.Envelope) *pcon.Record {
	t.Helper()
	ce, err := reg.ToCloudEvent(env)
	if err != nil {
		t.Fatal(err)
	}
	return binaryRecord(t, &ce)
}

// binaryRecord is ce through the SDK's Kafka binding in binary mode.
func binaryRecord(t testing.TB, ce *cloudevents.Event) *pcon.Record {
	t.Helper()
	topic, err := events.TopicOf(ce.Type())
	if err != nil {
		topic = "order-events"
	}
	pm := &sarama.ProducerMessage{Topic: topic}
	ctx := binding.WithForceBinary(kafka_sarama.WithSkipKeyMapping(context.Background()))
	if err := kafka_sarama.WriteProducerMessage(ctx, binding.ToMessage(ce), pm); err != nil {
		t.Fatal(err)
	}
	r := &pcon.Record{Topic: topic, Partition: 2, Offset: 1234, Timestamp: testTime}
	for _, h := range pm.Headers {
		r.Headers = append(r.Headers, pcon.Header{Key: h.Key, Value: h.Value})
	}
	if pm.Value != nil {
		v, err := pm.Value.Encode()
		if err != nil {
			t.Fatal(err)
		}
		r.Value = v
	}
	return r
}

// edit returns a copy of r changed by each of fs.
func edit(r *pcon.Record, fs ...func(*pcon.Record)) *pcon.Record {
	c := *r
	c.Headers = slices.Clone(r.Headers)
	c.Value = slices.Clone(r.Value)
	for _, f := range fs {
		f(&c)
	}
	return &c
}

// set replaces the value of every header named key exactly, or adds one.
func set(key, value string) func(*pcon.Record) {
	return func(r *pcon.Record) {
		found := false
		for i, h := range r.Headers {
			if string(h.Key) == key {
				r.Headers[i].Value, found = []byte(value), true
			}
		}
		if !found {
			r.Headers = append(r.Headers, pcon.Header{Key: []byte(key), Value: []byte(value)})
		}
	}
}

// add appends a header, whatever headers there are.
func add(key, value string) func(*pcon.Record) {
	return func(r *pcon.Record) {
		r.Headers = append(r.Headers, pcon.Header{Key: []byte(key), Value: []byte(value)})
	}
}

// del removes every header named key exactly.
func del(key string) func(*pcon.Record) {
	return func(r *pcon.Record) {
		r.Headers = slices.DeleteFunc(r.Headers, func(h pcon.Header) bool { return string(h.Key) == key })
	}
}

// rename gives the header named from the key to.
func rename(from, to string) func(*pcon.Record) {
	return func(r *pcon.Record) {
		for i, h := range r.Headers {
			if string(h.Key) == from {
				r.Headers[i].Key = []byte(to)
			}
		}
	}
}

// first moves the header named key to the front, so that one added after
// it wins.
func first(key string) func(*pcon.Record) {
	return func(r *pcon.Record) {
		slices.SortStableFunc(r.Headers, func(a, b pcon.Header) int {
			return boolInt(string(b.Key) == key) - boolInt(string(a.Key) == key)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func value(v string) func(*pcon.Record) {
	return func(r *pcon.Record) { r.Value = []byte(v) }
}

func upperKeys(r *pcon.Record) {
	for i, h := range r.Headers {
		r.Headers[i].Key = bytes.ToUpper(h.Key)
	}
}

// decodeCase is a record, and whether readBinary reads it itself (true) or
// leaves it to the SDK.
type decodeCase struct {
	name string
	rec  *pcon.Record
	fast bool
}

// corpus covers every event type of the registry with the edges of each
// attribute the relay writes (as the relay's own tests vary them), and
// hostile variants of the headers and the value: duplicates, odd case,
// versions, times, content types, extensions, the structured content mode.
func corpus(t testing.TB, reg *events.Registry) []decodeCase {
	t.Helper()
	evs := []struct {
		name string
		ev   any
	}{
		{"order paid", events.OrderPaidV1{OrderID: 7, PaymentID: 8, Amount: 12000, Items: []events.OrderItem{{ProductID: 3, Quantity: 2, UnitPrice: 6000}}}},
		{"like created", events.LikeCreatedV1{UserID: "user-1", ProductID: 3}},
		{"like canceled", events.LikeCanceledV1{UserID: "user-1", ProductID: 3}},
		{"product viewed", events.ProductViewedV1{ProductID: 3, UserID: "user-2"}},
		{"anonymous product viewed", events.ProductViewedV1{ProductID: 3}},
		{"stock depleted", events.StockDepletedV1{ProductID: 3}},
	}
	var out []decodeCase
	envs := map[string]events.Envelope{}
	types := map[string]bool{}
	for _, e := range evs {
		rec, err := reg.Marshal(e.ev)
		if err != nil {
			t.Fatal(err)
		}
		types[rec.Type] = true
		env := events.Envelope{ID: testID, Source: "commerce-api", Time: testTime, Sequence: 42, Record: rec}
		envs[e.name] = env
		out = append(out, decodeCase{e.name, relayRecord(t, reg, env), true})
	}
	if len(types) != len(reg.Types()) {
		t.Fatalf("sample events of %d types, the registry has %d", len(types), len(reg.Types()))
	}
	base := envs["order paid"]
	envCase := func(name string, fast bool, f func(*events.Envelope)) {
		env := base
		f(&env)
		out = append(out, decodeCase{name, relayRecord(t, reg, env), fast})
	}
	seoul := time.FixedZone("KST", 9*3600)
	envCase("time in another zone", true, func(e *events.Envelope) { e.Time = testTime.In(seoul) })
	envCase("time without a fraction", true, func(e *events.Envelope) { e.Time = time.Date(2026, 3, 4, 5, 6, 7, 0, seoul) })
	envCase("time with a millisecond fraction", true, func(e *events.Envelope) { e.Time = time.Date(2026, 3, 4, 5, 6, 7, 120_000_000, time.UTC) })
	envCase("zero time", true, func(e *events.Envelope) { e.Time = time.Time{} })
	envCase("id with spaces around", true, func(e *events.Envelope) { e.ID = "  " + testID + "\t" })
	envCase("source the SDK escapes", true, func(e *events.Envelope) { e.Source = "commerce api/ü" })
	envCase("absolute source", true, func(e *events.Envelope) { e.Source = "https://api.example.com/commerce?x=1#f" })
	envCase("another source", true, func(e *events.Envelope) { e.Source = "commerce-api-2" })
	envCase("largest sequence", true, func(e *events.Envelope) { e.Sequence = events.MaxSequence })
	envCase("sequence past the largest", false, func(e *events.Envelope) { e.Sequence = events.MaxSequence + 1 })
	envCase("negative sequence", false, func(e *events.Envelope) { e.Sequence = -1 })
	envCase("zero sequence", false, func(e *events.Envelope) { e.Sequence = 0 })
	envCase("unicode aggregate id", false, func(e *events.Envelope) { e.AggregateID = "주문-7" })
	envCase("empty aggregate id", false, func(e *events.Envelope) { e.AggregateID = "" })
	envCase("another aggregate", false, func(e *events.Envelope) { e.AggregateID = "8" })
	envCase("empty aggregate type", false, func(e *events.Envelope) { e.AggregateType = "" })
	envCase("the aggregate type of another event", false, func(e *events.Envelope) { e.AggregateType = events.AggregateProduct })
	envCase("empty data", false, func(e *events.Envelope) { e.Data = nil })
	envCase("type unknown to this build", false, func(e *events.Envelope) {
		e.Type, e.Data = "loopers.order.refunded.v2", []byte(`{"orderId":7}`)
	})
	envCase("type of another event", false, func(e *events.Envelope) { e.Type = "loopers.like.created.v1" })

	r := out[0].rec // order paid
	hc := func(name string, fast bool, fs ...func(*pcon.Record)) {
		out = append(out, decodeCase{name, edit(r, fs...), fast})
	}
	otherID := "9f0e8d7c-6b5a-4938-8271-605f4e3d2c1b"
	// The version and the content mode.
	hc("no specversion", false, del("ce_specversion"))
	hc("specversion 0.3", false, set("ce_specversion", "0.3"))
	hc("specversion with a space", false, set("ce_specversion", "1.0 "))
	hc("specversion 1", false, set("ce_specversion", "1"))
	hc("specversion 2.0", false, set("ce_specversion", "2.0"))
	hc("empty specversion", false, set("ce_specversion", ""))
	hc("specversion 0.3 then 1.0", true, set("ce_specversion", "0.3"), add("ce_specversion", "1.0"))
	hc("specversion 1.0 then 0.3", false, add("CE_SPECVERSION", "0.3"))
	hc("no content type", true, del("content-type"))
	hc("datacontenttype instead of content-type", true, rename("content-type", "ce_datacontenttype"))
	hc("content-type and datacontenttype alike", false, add("ce_datacontenttype", "application/json"))
	hc("empty content type", false, set("content-type", ""))
	hc("content type in upper case", false, set("content-type", "APPLICATION/JSON"))
	hc("content type with a charset", false, set("content-type", "application/json; charset=utf-8"))
	hc("content type with spaces around", false, set("content-type", " application/json "))
	hc("text content type", false, set("content-type", "text/plain"))
	hc("content type that is no media type", false, set("content-type", "garbage;;;"))
	hc("datacontenttype that is no media type", false, rename("content-type", "ce_datacontenttype"), set("ce_datacontenttype", "a/b/c"))
	hc("structured content type on a binary record", false, set("content-type", "application/cloudevents+json"))
	hc("structured batch content type", false, set("content-type", "application/cloudevents-batch+json"))
	hc("structured content type in odd case with parameters", false, set("content-type", "Application/CloudEvents+JSON; charset=utf-8"))
	hc("second content-type header wins", true, first("content-type"), add("Content-Type", "application/json"), set("content-type", "text/plain"))
	// Keys in odd case and duplicates: the binding lower-cases keys and
	// the last header of a key wins.
	hc("keys in upper case", true, upperKeys)
	hc("keys in mixed case", true, rename("ce_id", "Ce_Id"), rename("content-type", "Content-Type"), rename("ce_sequence", "cE_SeQuEnCe"))
	hc("duplicate id, the last valid", true, first("ce_id"), set("ce_id", "bogus"), add("ce_id", otherID))
	hc("duplicate id, the last bogus", false, add("ce_id", "bogus"))
	hc("duplicate id in another case", true, add("CE_ID", otherID))
	hc("duplicate type, the last ours", true, first("ce_type"), set("ce_type", "loopers.like.created.v1"), add("ce_type", "loopers.order.paid.v1"))
	hc("duplicate sequence", true, add("ce_sequence", "77"))
	hc("duplicate source", true, add("ce_source", "elsewhere"))
	hc("key that lower-cases to ce_id", false, add("ce_\u0130d", otherID))
	hc("key that lower-cases to an extension", false, add("ce_\u212Aey", "v"))
	hc("key of invalid UTF-8", false, add("ce_\xff", "v"))
	hc("other header of invalid UTF-8", false, add("\xffx", "v"))
	hc("non-ASCII header the binding ignores", false, add("trace-ü", "v"))
	// Headers the binding ignores, and extensions FromCloudEvent ignores.
	hc("other headers", true, add("traceparent", "00-1-2-01"), add("content_type", "text/plain"), add("ce-id", "bogus"), add("", "empty key"), add("c", "short"))
	hc("extra extension", true, add("ce_traceid", "abc"), add("ce_Partition7", ""))
	hc("extension named like a binding one", true, add("ce_kafkatopic", "elsewhere"), add("ce_kafkaoffset", "x"))
	hc("extension with an empty name", false, add("ce_", "v"))
	hc("extension with a dash", false, add("ce_foo-bar", "v"))
	hc("extension with an underscore", false, add("ce_foo_bar", "v"))
	hc("extension with a long name", true, add("ce_"+strings.Repeat("x", 40), "v"))
	hc("absolute dataschema", false, add("ce_dataschema", "https://example.com/schema"))
	hc("relative dataschema", false, add("ce_dataschema", "schema"))
	hc("subject", false, add("ce_subject", "s"))
	hc("blank subject", false, add("ce_subject", "  "))
	// The id.
	hc("upper-case id", true, set("ce_id", strings.ToUpper(testID)))
	hc("id in braces", false, set("ce_id", "{"+testID+"}"))
	hc("id as a URN", false, set("ce_id", "urn:uuid:"+testID))
	hc("id without dashes", false, set("ce_id", strings.ReplaceAll(testID, "-", "")))
	hc("id with spaces around, as read", false, set("ce_id", " "+testID+" "))
	hc("id that is no UUID", false, set("ce_id", strings.Repeat("x", 36)))
	hc("id with a non-hex digit", false, set("ce_id", "g"+testID[1:]))
	hc("empty id", false, set("ce_id", ""))
	hc("blank id", false, set("ce_id", "   "))
	hc("no id", false, del("ce_id"))
	// The type.
	hc("type with spaces around", false, set("ce_type", " loopers.order.paid.v1\n"))
	hc("type in upper case", false, set("ce_type", "LOOPERS.ORDER.PAID.V1"))
	hc("unknown type", false, set("ce_type", "loopers.order.refunded.v1"))
	hc("empty type", false, set("ce_type", ""))
	hc("no type", false, del("ce_type"))
	// The source.
	hc("no source", false, del("ce_source"))
	hc("empty source", false, set("ce_source", ""))
	hc("blank source", true, set("ce_source", " "))
	hc("source that is no URI", false, set("ce_source", "%zz"))
	hc("source with a space", true, set("ce_source", "commerce api"))
	hc("source with a colon in its first segment", false, set("ce_source", "1:x"))
	hc("source with a scheme", true, set("ce_source", "urn:commerce:api"))
	hc("network-path source", true, set("ce_source", "//host/path"))
	hc("source with a control character", false, set("ce_source", "a\x7fb"))
	hc("source with an unclosed IPv6 host", false, set("ce_source", "http://[::1"))
	// The time.
	hc("no time", true, del("ce_time"))
	hc("time with an offset", true, set("ce_time", "2026-03-04T14:06:07.5+09:00"))
	hc("time with a zero offset", true, set("ce_time", "2026-03-04T05:06:07+00:00"))
	hc("time with a negative zero offset", true, set("ce_time", "2026-03-04T05:06:07-00:00"))
	hc("time with ten fraction digits", true, set("ce_time", "2026-03-04T05:06:07.1234567891Z"))
	hc("time with a comma fraction", true, set("ce_time", "2026-03-04T05:06:07,5Z"))
	hc("time in lower case", false, set("ce_time", "2026-03-04t05:06:07z"))
	hc("time with a space for T", false, set("ce_time", "2026-03-04 05:06:07Z"))
	hc("leap second", false, set("ce_time", "2026-12-31T23:59:60Z"))
	hc("zero time, as read", true, set("ce_time", "0001-01-01T00:00:00Z"))
	hc("zero instant in another zone", true, set("ce_time", "0001-01-01T09:00:00+09:00"))
	hc("year zero", true, set("ce_time", "0000-01-01T00:00:00Z"))
	hc("last instant of year 9999", true, set("ce_time", "9999-12-31T23:59:59.999999999Z"))
	hc("offset of 24 hours", true, set("ce_time", "2026-03-04T05:06:07+24:00"))
	hc("time that is no time", false, set("ce_time", "yesterday"))
	hc("empty time", false, set("ce_time", ""))
	hc("time with a space before", false, set("ce_time", " 2026-03-04T05:06:07Z"))
	hc("date only", false, set("ce_time", "2026-03-04"))
	hc("unix time", false, set("ce_time", "1772600767"))
	// The extensions FromCloudEvent reads.
	hc("aggregate type in lower case", false, set("ce_aggregatetype", "order"))
	hc("aggregate type with a space", false, set("ce_aggregatetype", " Order"))
	hc("no aggregate type", false, del("ce_aggregatetype"))
	hc("aggregate id with a space", false, set("ce_aggregateid", " 7"))
	hc("aggregate id with a leading zero", false, set("ce_aggregateid", "07"))
	hc("no aggregate id", false, del("ce_aggregateid"))
	for _, seq := range []string{"0", "01", "+1", "-1", "1e3", " 1", "1 ", "", "1_000", "0x10", "9007199254740993", "99999999999999999999", "١"} {
		hc(fmt.Sprintf("sequence %q", seq), false, set("ce_sequence", seq))
	}
	hc("sequence 1", true, set("ce_sequence", "1"))
	hc("sequence 2^53", true, set("ce_sequence", "9007199254740992"))
	hc("no sequence", false, del("ce_sequence"))
	// The value.
	hc("no value", false, func(r *pcon.Record) { r.Value = nil })
	hc("empty value", false, value(""))
	hc("trailing data", false, value(string(r.Value)+" {}"))
	hc("unknown member", false, value(`{"orderId":7,"paymentId":8,"amount":12000,"items":[{"productId":3,"quantity":2,"unitPrice":6000}],"x":1}`))
	hc("legacy member names", true, value(`{"OrderID":7,"PaymentID":8,"Amount":12000,"Items":[{"ProductID":3,"Quantity":2,"UnitPrice":6000}]}`))
	hc("white space around the value", true, value(" \n"+string(r.Value)+"\n "))
	hc("null value", false, value("null"))
	hc("value that is no JSON", false, value("{"))
	hc("value with a byte order mark", false, value("\ufeff"+string(r.Value)))
	hc("amount that is not the sum", false, value(`{"orderId":7,"paymentId":8,"amount":1,"items":[{"productId":3,"quantity":2,"unitPrice":6000}]}`))

	// Other modes the SDK reads: the structured content mode, and
	// version 0.3 in binary mode.
	ce, err := reg.ToCloudEvent(base)
	if err != nil {
		t.Fatal(err)
	}
	structured, err := format.JSON.Marshal(&ce)
	if err != nil {
		t.Fatal(err)
	}
	sr := &pcon.Record{Topic: "order-events", Key: []byte("7"), Value: structured,
		Headers: []pcon.Header{{Key: []byte("content-type"), Value: []byte(cloudevents.ApplicationCloudEventsJSON)}}}
	out = append(out,
		decodeCase{"structured mode", sr, false},
		decodeCase{"structured mode with binary headers too", edit(sr, func(c *pcon.Record) { c.Headers = slices.Clone(r.Headers) }, set("content-type", cloudevents.ApplicationCloudEventsJSON)), false},
		decodeCase{"structured mode that is no JSON", edit(sr, value("{")), false},
	)
	v03 := ce.Clone()
	v03.SetSpecVersion(cloudevents.VersionV03)
	out = append(out, decodeCase{"version 0.3", binaryRecord(t, &v03), false})
	return out
}

// sdkDeterministic reports whether the SDK's outcome for r is the same
// whatever order it reads the headers in. The binding keeps the headers in
// a map and sets the attributes in its order: with both content-type and
// ce_datacontenttype the data content type is whichever comes last (one
// may be valid, the other not), and in version 0.3 some attributes change
// meaning when the context is converted to 0.3 midway. readBinary leaves
// those records to the SDK.
func sdkDeterministic(r *pcon.Record) bool {
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[strings.ToLower(string(h.Key))] = string(h.Value)
	}
	_, ct := hs["content-type"]
	_, dct := hs["ce_datacontenttype"]
	return (!ct || !dct) && hs["ce_specversion"] != "0.3"
}

// permanent reports whether err is exactly pcon.Permanent of what it wraps.
func permanent(err error) bool {
	inner := errors.Unwrap(err)
	return inner != nil && err.Error() == pcon.Permanent(inner).Error()
}

// sentinel names the events error err matches.
func sentinel(err error) string {
	switch {
	case errors.Is(err, events.ErrUnknownType):
		return "ErrUnknownType"
	case errors.Is(err, events.ErrBadData):
		return "ErrBadData"
	}
	return "none"
}

// exactTime compares times by instant, zone and location (UTC is not
// Local, even where Local is UTC): the decoded time goes to logs and the
// horizon check as it is. Parsing makes a new location for each offset,
// so location pointers differ between equal times.
var exactTime = cmp.Comparer(func(a, b time.Time) bool {
	return a.Equal(b) && a.String() == b.String() && a.Location().String() == b.Location().String()
})

// checkDecode holds every way of decoding r to the SDK's outcome: what
// readBinary reads must be what the SDK reads; decode (readBinary, else
// the SDK) must end as the SDK does, with the same Message or an error
// that is permanent and matches the same sentinel.
func checkDecode(t *testing.T, h *Handlers, r *pcon.Record) (fast bool) {
	t.Helper()
	ctx := context.Background()
	want, wantErr := h.decodeSDK(ctx, r)
	if wantErr != nil && (!permanent(wantErr) || sentinel(wantErr) == "none") {
		t.Fatalf("the SDK's error %v is not permanent with a sentinel", wantErr)
	}
	got, fast := h.readBinary(r)
	if fast {
		if wantErr != nil {
			t.Fatalf("read %+v, the SDK refuses the record: %v", got, wantErr)
		}
		if diff := cmp.Diff(want, got, exactTime); diff != "" {
			t.Fatalf("read (-sdk +readBinary):\n%s", diff)
		}
	}
	got, err := h.decode(ctx, r)
	if err != nil && (!permanent(err) || sentinel(err) == "none") {
		t.Fatalf("error %v is not permanent with a sentinel", err)
	}
	if !sdkDeterministic(r) {
		if fast {
			t.Fatal("readBinary read a record whose outcome in the SDK depends on map order")
		}
		return fast // decode ran the SDK again, which may have read it the other way
	}
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode: error %v, the SDK's %v", err, wantErr)
	}
	if err != nil {
		if sentinel(err) != sentinel(wantErr) {
			t.Fatalf("decode: error %v, the SDK's %v", err, wantErr)
		}
		return fast
	}
	if diff := cmp.Diff(want, got, exactTime); diff != "" {
		t.Fatalf("decode (-sdk +decode):\n%s", diff)
	}
	return fast
}

// TestDecodeMatchesSDK: for every record of the corpus, decoding gives
// exactly the Message the SDK's binding and FromCloudEvent give, or fails
// permanently with the same sentinel where they fail; the relay's records
// are read without the SDK.
func TestDecodeMatchesSDK(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	h := &Handlers{reg: reg} // decoding needs only the registry
	names := map[string]bool{}
	for _, tc := range corpus(t, reg) {
		if names[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		names[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for pass := range 2 { // the second reads the source remembered
				if fast := checkDecode(t, h, tc.rec); fast != tc.fast {
					t.Errorf("pass %d: read without the SDK %v, want %v", pass, fast, tc.fast)
				}
			}
		})
	}
}

// TestDecodeConcurrently decodes records of several sources from many
// goroutines at once, as pcon does, for the race detector: the remembered
// source changes under the readers.
func TestDecodeConcurrently(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	h := &Handlers{reg: reg}
	rec, err := reg.Marshal(events.LikeCreatedV1{UserID: "u", ProductID: 9})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*pcon.Record
	var want []string
	for i := range 4 {
		src := fmt.Sprintf("commerce api %d", i)
		recs = append(recs, relayRecord(t, reg, events.Envelope{ID: testID, Source: src, Time: testTime, Sequence: 5, Record: rec}))
		want = append(want, strings.ReplaceAll(src, " ", "%20"))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				n := (g + i) % len(recs)
				m, err := h.decode(context.Background(), recs[n])
				if err != nil {
					t.Error(err)
					return
				}
				if m.Source != want[n] {
					t.Errorf("source %q, want %q", m.Source, want[n])
					return
				}
			}
		})
	}
	wg.Wait()
}

// fuzzHeaders writes headers one a line, the key before the first colon.
func fuzzHeaders(hs []pcon.Header) (string, bool) {
	var b strings.Builder
	for _, h := range hs {
		if bytes.ContainsAny(h.Key, ":\n") || bytes.ContainsRune(h.Value, '\n') {
			return "", false
		}
		b.Write(h.Key)
		b.WriteByte(':')
		b.Write(h.Value)
		b.WriteByte('\n')
	}
	return b.String(), true
}

func parseFuzzHeaders(s string) []pcon.Header {
	var hs []pcon.Header
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(line, "\n")
		k, v, _ := strings.Cut(line, ":")
		hs = append(hs, pcon.Header{Key: []byte(k), Value: []byte(v)})
	}
	return hs
}

// FuzzDecodeMatchesSDK mutates the headers and the value of records (the
// corpus's are its seeds) and holds decoding to the SDK's outcome as
// TestDecodeMatchesSDK does.
func FuzzDecodeMatchesSDK(f *testing.F) {
	reg := events.NewRegistry()
	for _, tc := range corpus(f, reg) {
		if hs, ok := fuzzHeaders(tc.rec.Headers); ok {
			f.Add(hs, tc.rec.Value)
		}
	}
	h := &Handlers{reg: reg}
	f.Fuzz(func(t *testing.T, headers string, value []byte) {
		checkDecode(t, h, &pcon.Record{Topic: "order-events", Partition: 1, Offset: 7, Headers: parseFuzzHeaders(headers), Value: value})
	})
}

// BenchmarkDecode decodes a typical record of an order and of a view, as
// decode does and through the SDK's binding alone.
func BenchmarkDecode(b *testing.B) {
	reg := events.NewRegistry()
	h := &Handlers{reg: reg}
	for _, ev := range []struct {
		name string
		ev   any
	}{
		{"order paid", events.OrderPaidV1{OrderID: 1234567, PaymentID: 7654321, Amount: 12000, Items: []events.OrderItem{{ProductID: 345, Quantity: 2, UnitPrice: 6000}}}},
		{"product viewed", events.ProductViewedV1{ProductID: 345, UserID: "user-12345"}},
	} {
		rec, err := reg.Marshal(ev.ev)
		if err != nil {
			b.Fatal(err)
		}
		r := relayRecord(b, reg, events.Envelope{ID: testID, Source: "commerce-api", Time: time.Now(), Sequence: 123456789, Record: rec})
		for _, bm := range []struct {
			name   string
			decode func(context.Context, *pcon.Record) (events.Message, error)
		}{
			{"decode", h.decode},
			{"sdk", h.decodeSDK},
			// The payload alone, which both decode: what is left of
			// decode once the envelope costs nothing.
			{"payload only", func(context.Context, *pcon.Record) (events.Message, error) {
				ev, err := reg.Unmarshal(rec.Type, r.Value)
				return events.Message{Event: ev}, err
			}},
		} {
			b.Run(ev.name+"/"+bm.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := bm.decode(context.Background(), r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
