// Package events holds the commerce domain events and the registry that maps
// them to and from their transport envelope.
//
// Domain events are plain Go structs: they know nothing of Kafka, JSON or
// CloudEvents. The [Registry] is the one place that knows, for each event, its
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
// Topics are derived from the type by convention ("loopers.order.paid.v1" →
// "order-events") and never stored; [Topics] lists every topic the registry's
// types publish to, which is the single source of truth for infrastructure
// that creates them.
package events
