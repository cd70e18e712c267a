package e2e

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/eventcontract"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestEventContract: every record the running services write to Kafka
// matches the AsyncAPI document that commerce-api serves, as every API
// response matches its OpenAPI document: each event type through the API,
// the outbox and the relay, and a dead letter and its parked copy written
// by product-consumers. A record written before the payloads had camelCase
// names is published unchanged and still consumed.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestEventContract(t *testing.T) {
	c, err := eventcontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	s := newSystem(t)
	s.consumerEnv["PRODUCT_CONSUMERS_RECLAIM_INTERVAL"] = "500ms" // park the poison event below soon
	s.startRelay("relay-a")
	s.startConsumers()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.api+"/asyncapi.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.apiClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(served, events.AsyncAPI()) {
		t.Fatalf("/asyncapi.yaml: %d, %d bytes; want 200 and the document pkg/events embeds", resp.StatusCode, len(served))
	}

	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "p", "price": 700, "stock": 2}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}
	pid := strconv.FormatInt(p.ID, 10)
	s.expect(s.call("POST", "/products/"+pid+"/likes", "alice", nil, nil), http.StatusOK)
	s.expect(s.call("DELETE", "/products/"+pid+"/likes", "alice", nil, nil), http.StatusOK)
	s.expect(s.call("POST", "/products/"+pid+"/likes", "bob", nil, nil), http.StatusOK)
	s.expect(s.call("GET", "/products/"+pid, "carol", nil, nil), http.StatusOK)
	s.expect(s.call("GET", "/products/"+pid, "", nil, nil), http.StatusOK)
	var order struct{ ID int64 }
	if !s.expect(s.call("POST", "/orders", "dave", map[string]any{"items": []map[string]any{{"productId": p.ID, "quantity": 2}}}, &order), http.StatusCreated) {
		t.FailNow()
	}
	s.expect(s.call("POST", "/orders/"+strconv.FormatInt(order.ID, 10)+"/payments", "dave", nil, nil), http.StatusOK)

	// Straight into the outbox: a like as written before the json tags, and
	// an event of a type no consumer knows.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	legacyID, poisonID := uuid.NewString(), uuid.NewString()
	legacy := []byte(`{"UserID":"erin","ProductID":` + pid + `}`)
	for _, e := range []outbox.Entry{
		{EventID: legacyID, Source: "commerce-api", Record: events.Record{Type: "loopers.like.created.v1", AggregateType: events.AggregateProduct, AggregateID: pid, Data: legacy}},
		{EventID: poisonID, Source: "e2e", Record: events.Record{Type: "loopers.product.exploded.v1", AggregateType: events.AggregateProduct, AggregateID: pid, Data: []byte("{}")}},
	} {
		if _, err := outbox.Insert(ctx, conn.QueryRow, e); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int64]aggregate{p.ID: {Likes: 2, Sales: 2, Amount: 1400, Views: 2}} // bob's like and erin's
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, 60*time.Second)); diff != "" {
		t.Fatalf("aggregates (-want +got):\n%s", diff)
	}

	counts := map[string]int{
		"like-events": 4, "product-events": 3, "order-events": 1, "stock-events": 1,
		"product-events.DLT": 1, "product-events.PARKED": 1,
	}
	seen := map[string]int{}
	var poison map[string]string
	copies := map[string]map[string]string{} // the dead letter and its parked copy, by topic
	for _, topic := range c.Topics() {
		if counts[topic] == 0 {
			continue
		}
		for _, m := range testenv.ReadTopic(t, s.kafka.Brokers, s.topic(topic), counts[topic], 60*time.Second) {
			r := s.pipelineNames(eventcontract.FromSarama(m))
			h := testenv.Headers(m)
			switch id := h["ce_id"]; {
			case id == legacyID:
				msg, _ := c.Message("loopers.like.created.v1")
				if err := msg.CheckHeaders(h); err != nil {
					t.Errorf("the old record's headers: %v", err)
				}
				if !bytes.Equal(m.Value, legacy) {
					t.Errorf("the old record was published as %s, not verbatim", m.Value)
				}
			case id == poisonID && topic == "product-events":
				poison = h
				if _, err := c.Check(r); err == nil {
					t.Errorf("an event of an unknown type passes the contract check")
				}
			default:
				msg, err := c.Check(r)
				if err != nil {
					t.Errorf("%s/%d@%d: %v", m.Topic, m.Partition, m.Offset, err)
					continue
				}
				seen[msg.Name]++
				if topic != events.DLTOf("product-events") && topic != events.ParkedOf("product-events") {
					continue
				}
				maps.DeleteFunc(h, func(k, _ string) bool { return strings.HasPrefix(k, pcon.HeaderPrefix) })
				copies[topic] = h
			}
		}
	}
	wantSeen := map[string]int{"dead-letter": 1, "parked": 1}
	for _, typ := range events.NewRegistry().Types() {
		wantSeen[typ] = 1
	}
	wantSeen["loopers.like.created.v1"], wantSeen["loopers.product.viewed.v1"] = 2, 2
	if diff := cmp.Diff(wantSeen, seen); diff != "" {
		t.Errorf("records that match the contract, by message (-want +got):\n%s", diff)
	}

	// The dead letter and its parked copy keep the original's headers.
	if poison == nil {
		t.Fatal("the poison event was not published")
	}
	for topic, h := range copies {
		if diff := cmp.Diff(poison, h); diff != "" {
			t.Errorf("%s: the original's headers (-original +copy):\n%s", topic, diff)
		}
	}
}

// pipelineNames turns the names on the cluster in r, under the system's
// KAFKA_PREFIX, into the pipeline's own, the contract's: its topic, and the
// topic and consumer group its dead-letter headers name. The document
// describes one pipeline; the prefix places one on a cluster. A name that
// lacks the prefix fails the test: the reclaimer re-drives to the topic the
// header names.
func (s *system) pipelineNames(r eventcontract.Record) eventcontract.Record {
	s.t.Helper()
	unprefix := func(what, name string) string {
		s.t.Helper()
		pipeline, ok := strings.CutPrefix(name, s.kafka.Prefix)
		if !ok {
			s.t.Errorf("%s %q is not named under the prefix %q", what, name, s.kafka.Prefix)
		}
		return pipeline
	}
	r.Topic = unprefix("topic", r.Topic)
	r.Headers = slices.Clone(r.Headers)
	for i, h := range r.Headers {
		if h.Key == pcon.HeaderOriginalTopic || h.Key == pcon.HeaderConsumerGroup {
			r.Headers[i].Value = unprefix(r.Topic+" header "+h.Key, h.Value)
		}
	}
	return r
}
