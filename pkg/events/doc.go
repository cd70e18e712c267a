// Package events holds the commerce domain events and the registry that maps
// them to and from their transport envelope.
//
// Domain events are plain Go structs: they know nothing of Kafka or
// CloudEvents, and their json tags name the payload's members on the wire.
// The [Registry] is the one place that knows, for each event, its
// CloudEvents type string, the aggregate it belongs to and therefore its Kafka
// key, and the topic the type is published to.
//
// Writing an event (the producer side, e.g. an outbox writer):
//
//	reg := events.NewRegistry()
//	rec, err := reg.Marshal(events.LikeCreatedV1{UserID: "u1", ProductID: 7})
//	// rec.Type == "loopers.like.created.v1", rec.AggregateType == "Product",
//	// rec.AggregateID == "7", rec.Data is the JSON payload.
//
// Turning a stored record into a CloudEvent (the relay side):
//
//	ce, err := reg.ToCloudEvent(events.Envelope{ID: id, Source: "commerce-api",
//		Time: createdAt, Sequence: outboxID, Record: rec})
//
// Reading it back (the consumer side):
//
//	msg, err := reg.FromCloudEvent(ce)
//	if errors.Is(err, events.ErrUnprocessable) { /* dead-letter it, retrying cannot help */ }
//	switch ev := msg.Event.(type) {
//	case events.LikeCreatedV1:
//	}
//
// # The wire contract
//
// [AsyncAPI] returns the AsyncAPI 3.0 document of the topics (commerce-api
// serves it at /asyncapi.yaml): each topic and its key (the aggregate id),
// the CloudEvents headers (ce_id, ce_type, ce_source, ce_time,
// ce_specversion, content-type, ce_aggregatetype, ce_aggregateid,
// ce_sequence), the JSON Schema of each payload, and the dead-letter and
// parked records with pcon's headers. The payload members are the types'
// json tags, camelCase like the REST API: {"userId":"alice","productId":227}.
// A published version never changes; a change is a new type (…v2).
//
// Records written before the types had json tags carry Go's field names,
// {"UserID":"alice","ProductID":227}, and may still arrive: from the
// topics, from outbox rows not yet published, and from dead letters
// re-driven later. They decode to the same events, because encoding/json
// matches member names to tags without regard to case and every old name
// differs from its tag in case only; the tests decode the old bytes of
// every type. For the same reason a reader built before the tags reads the
// new names, so producers and consumers may be upgraded in any order. The decoder refuses members it does not know, so a misspelt
// member is bad data rather than a zero value.
//
// Topics are derived from the type by convention ("loopers.order.paid.v1" →
// "order-events") and never stored; [Topics] lists every topic the registry's
// types publish to, which is the single source of truth for infrastructure
// that creates them.
package events
