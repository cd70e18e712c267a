package publisher

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// traceOf returns the trace headers of hs by name.
func traceOf(hs []kgo.RecordHeader) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		switch h.Key {
		case headerTraceParent, headerTraceState, headerCETraceParent, headerCETraceState:
			out[h.Key] = string(h.Value)
		}
	}
	return out
}

// TestTraceHeaders: a message's stored trace context is on its record
// unchanged, as the plain W3C headers and as the CloudEvents extension the
// SDK's binding writes for the same event; a message without one has no
// trace header, and a state without a parent is dropped.
func TestTraceHeaders(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	rec, err := reg.Marshal(events.LikeCreatedV1{UserID: "user-1", ProductID: 3})
	if err != nil {
		t.Fatal(err)
	}
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "vendor=opaque,other=x"
	)
	base := Message{Sequence: 9, EventID: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a", Type: rec.Type, Source: "commerce-api",
		AggregateType: rec.AggregateType, AggregateID: rec.AggregateID, Data: rec.Data}
	with := func(parent, state string) Message { m := base; m.TraceParent, m.TraceState = parent, state; return m }

	// The SDK's binding, given the distributed-tracing extension.
	ce, err := reg.ToCloudEvent(events.Envelope{ID: base.EventID, Source: base.Source, Sequence: base.Sequence, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	ce.SetExtension("traceparent", tp)
	ce.SetExtension("tracestate", ts)
	sdk, err := binaryRecord(context.Background(), &ce, "like-events", base.AggregateID)
	if err != nil {
		t.Fatal(err)
	}
	sdkTrace := traceOf(sdk.Headers)

	for _, tc := range []struct {
		name string
		m    Message
		want map[string]string
	}{
		{"parent and state", with(tp, ts), map[string]string{
			"traceparent": tp, "tracestate": ts, "ce_traceparent": sdkTrace["ce_traceparent"], "ce_tracestate": sdkTrace["ce_tracestate"]}},
		{"parent only", with(tp, ""), map[string]string{"traceparent": tp, "ce_traceparent": tp}},
		{"none", base, map[string]string{}},
		{"state without a parent", with("", ts), map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &recordWriter{reg: reg}
			r, err := w.write(context.Background(), tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, traceOf(r.Headers)); diff != "" {
				t.Errorf("trace headers (-want +got):\n%s", diff)
			}
			// The event's own headers are those of the message without a
			// trace context.
			plain, err := w.write(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(plain.Headers, r.Headers[:len(plain.Headers)]); diff != "" {
				t.Errorf("CloudEvents headers changed (-without +with trace):\n%s", diff)
			}
		})
	}
	if sdkTrace["ce_traceparent"] != tp || sdkTrace["ce_tracestate"] != ts {
		t.Errorf("the SDK wrote %v, want the extension's values", sdkTrace)
	}
}
