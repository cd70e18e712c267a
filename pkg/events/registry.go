package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
)

// Aggregate types named by the registry's events.
const (
	AggregateOrder   = "Order"
	AggregateProduct = "Product"
)

// CloudEvents extension attribute names carried by every event.
const (
	ExtAggregateType = "aggregatetype"
	ExtAggregateID   = "aggregateid"
	ExtSequence      = "sequence"
)

// ErrUnprocessable marks an event that can never be processed, however often it is
// retried: its type is unknown or its data cannot be decoded. Consumers send
// such events to the dead-letter topic at once.
var ErrUnprocessable = errors.New("unprocessable event")

// ErrUnknownType is returned for an event type the registry does not know. It
// matches [ErrUnprocessable] with errors.Is.
var ErrUnknownType = fmt.Errorf("unknown event type: %w", ErrUnprocessable)

// ErrBadData is returned for an event whose envelope or data is malformed or
// invalid. It matches [ErrUnprocessable] with errors.Is.
var ErrBadData = fmt.Errorf("bad event data: %w", ErrUnprocessable)

// Record is an event as an outbox stores it: everything needed to publish it
// later, with the payload already encoded.
type Record struct {
	Type          string
	AggregateType string
	AggregateID   string
	Data          []byte
}

// Envelope is a [Record] with the transport identity the outbox assigns.
type Envelope struct {
	ID       string    // unique event id (UUID); the idempotency identity end to end
	Source   string    // the emitting service
	Time     time.Time // when the domain event happened
	Sequence int64     // monotonic per aggregate (the outbox row id)
	Record
}

// Message is a decoded event as a consumer sees it.
type Message struct {
	ID            string
	Type          string
	Source        string
	Time          time.Time
	AggregateType string
	AggregateID   string
	Sequence      int64
	// Event is the domain event value, for example [LikeCreatedV1].
	Event any
}

type entry struct {
	typ           string
	goType        reflect.Type
	aggregateType string
	aggregateID   func(any) string
	decode        func([]byte) (any, error)
}

// Registry maps domain event Go types to CloudEvents types and aggregates. It
// is immutable after construction and safe for concurrent use.
type Registry struct {
	byType map[string]entry
	byGo   map[reflect.Type]entry
}

// NewRegistry returns a registry holding every domain event of this package.
func NewRegistry() *Registry {
	r := &Registry{byType: map[string]entry{}, byGo: map[reflect.Type]entry{}}
	register(r, "loopers.order.paid.v1", AggregateOrder,
		func(e OrderPaidV1) string { return strconv.FormatInt(e.OrderID, 10) },
		validateOrder)
	register(r, "loopers.like.created.v1", AggregateProduct,
		func(e LikeCreatedV1) string { return strconv.FormatInt(e.ProductID, 10) },
		func(e LikeCreatedV1) error { return userProduct(e.UserID, e.ProductID) })
	register(r, "loopers.like.canceled.v1", AggregateProduct,
		func(e LikeCanceledV1) string { return strconv.FormatInt(e.ProductID, 10) },
		func(e LikeCanceledV1) error { return userProduct(e.UserID, e.ProductID) })
	register(r, "loopers.product.viewed.v1", AggregateProduct,
		func(e ProductViewedV1) string { return strconv.FormatInt(e.ProductID, 10) },
		func(e ProductViewedV1) error { return viewer(e.UserID, e.ProductID) })
	register(r, "loopers.stock.depleted.v1", AggregateProduct,
		func(e StockDepletedV1) string { return strconv.FormatInt(e.ProductID, 10) },
		func(e StockDepletedV1) error { return positive("productId", e.ProductID) })
	return r
}

// register adds T under typ. It panics on a duplicate or a type whose topic
// cannot be derived, both programming errors caught by any test that builds a
// registry.
func register[T any](r *Registry, typ, aggregateType string, id func(T) string, validate func(T) error) {
	if _, err := TopicOf(typ); err != nil {
		panic(err)
	}
	gt := reflect.TypeFor[T]()
	if _, dup := r.byType[typ]; dup {
		panic("events: duplicate type " + typ)
	}
	e := entry{
		typ:           typ,
		goType:        gt,
		aggregateType: aggregateType,
		aggregateID:   func(v any) string { return id(v.(T)) },
		decode: func(data []byte) (any, error) {
			var v T
			dec := json.NewDecoder(bytes.NewReader(data))
			// A published version never gains a member (a change is a new
			// version), so an unknown one is a misspelling or a forgery: a
			// "unit_price" must not decode as a free order line.
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("%s: %w: %w", typ, ErrBadData, err)
			}
			if dec.More() {
				return nil, fmt.Errorf("%s: %w: trailing data after the JSON value", typ, ErrBadData)
			}
			if err := validate(v); err != nil {
				return nil, fmt.Errorf("%s: %w: %w", typ, ErrBadData, err)
			}
			return v, nil
		},
	}
	r.byType[typ] = e
	r.byGo[gt] = e
}

// Types lists the registered event types, sorted.
func (r *Registry) Types() []string {
	out := make([]string, 0, len(r.byType))
	for t := range r.byType {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Topics lists the topics the registered types are published to, sorted and
// without duplicates. Dead-letter topics are not included; see [Registry.AllTopics].
func (r *Registry) Topics() []string {
	var out []string
	for t := range r.byType {
		topic, _ := TopicOf(t) // validated at registration
		out = append(out, topic)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AllTopics lists every topic with its dead-letter and parked topics,
// sorted. It is the one list infrastructure (compose, Kubernetes, the dev
// broker) creates.
func (r *Registry) AllTopics() []string {
	var out []string
	for _, t := range r.Topics() {
		out = append(out, t, DLTOf(t), ParkedOf(t))
	}
	slices.Sort(out)
	return out
}

// Marshal encodes a domain event, passed by value, into a [Record].
func (r *Registry) Marshal(ev any) (Record, error) {
	e, ok := r.byGo[reflect.TypeOf(ev)]
	if !ok {
		return Record{}, fmt.Errorf("%T: %w", ev, ErrUnknownType)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return Record{}, fmt.Errorf("encode %s: %w", e.typ, err)
	}
	return Record{Type: e.typ, AggregateType: e.aggregateType, AggregateID: e.aggregateID(ev), Data: data}, nil
}

// Unmarshal decodes data of the given event type into its domain event value.
// Errors match [ErrUnprocessable].
func (r *Registry) Unmarshal(eventType string, data []byte) (any, error) {
	e, ok := r.byType[eventType]
	if !ok {
		return nil, fmt.Errorf("%q: %w", eventType, ErrUnknownType)
	}
	return e.decode(data)
}

// ToCloudEvent builds the CloudEvents 1.0 transport envelope of env. The data
// is carried verbatim as application/json.
func (r *Registry) ToCloudEvent(env Envelope) (cloudevents.Event, error) {
	ce := cloudevents.NewEvent()
	ce.SetID(env.ID)
	ce.SetType(env.Type)
	ce.SetSource(env.Source)
	ce.SetTime(env.Time)
	ce.SetExtension(ExtAggregateType, env.AggregateType)
	ce.SetExtension(ExtAggregateID, env.AggregateID)
	ce.SetExtension(ExtSequence, strconv.FormatInt(env.Sequence, 10))
	// The payload is already JSON; SetData would re-encode (and so re-parse)
	// it, which is most of this function's cost on the relay's hot path.
	ce.SetDataContentType(cloudevents.ApplicationJSON)
	ce.DataEncoded = env.Data
	if err := ce.Validate(); err != nil {
		return cloudevents.Event{}, fmt.Errorf("event %s: %w", env.ID, err)
	}
	return ce, nil
}

// FromCloudEvent decodes a CloudEvent into a [Message]. An unknown type, a
// missing or malformed extension, an id that is not a UUID, data larger than
// [MaxRecordBytes], undecodable data, data outside the payload bounds, or an
// aggregate that is not the payload's returns an error matching
// [ErrUnprocessable]: retrying such an event cannot help.
func (r *Registry) FromCloudEvent(ce cloudevents.Event) (Message, error) {
	if err := ce.Validate(); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrBadData, err)
	}
	if !canonicalUUID(ce.ID()) {
		return Message{}, fmt.Errorf("%w: id %.64q is not a UUID", ErrBadData, ce.ID())
	}
	if n := len(ce.Data()); n > MaxRecordBytes {
		return Message{}, fmt.Errorf("event %s: %w: data of %d bytes exceeds %d", ce.ID(), ErrBadData, n, MaxRecordBytes)
	}
	e, ok := r.byType[ce.Type()]
	if !ok {
		return Message{}, fmt.Errorf("event %s: %q: %w", ce.ID(), ce.Type(), ErrUnknownType)
	}
	ev, err := e.decode(ce.Data())
	if err != nil {
		return Message{}, fmt.Errorf("event %s: %w", ce.ID(), err)
	}
	m := Message{ID: ce.ID(), Type: ce.Type(), Source: ce.Source(), Time: ce.Time(), Event: ev}
	ext := ce.Extensions()
	m.AggregateType, _ = ext[ExtAggregateType].(string)
	if m.AggregateType != e.aggregateType {
		return Message{}, fmt.Errorf("event %s: %w: extension %s is %.64q, want %q", ce.ID(), ErrBadData, ExtAggregateType, m.AggregateType, e.aggregateType)
	}
	m.AggregateID, _ = ext[ExtAggregateID].(string)
	if want := e.aggregateID(ev); m.AggregateID != want {
		return Message{}, fmt.Errorf("event %s: %w: extension %s is %.64q, the payload's aggregate is %q", ce.ID(), ErrBadData, ExtAggregateID, m.AggregateID, want)
	}
	seq, _ := ext[ExtSequence].(string)
	if m.Sequence, err = strconv.ParseInt(seq, 10, 64); err != nil || m.Sequence <= 0 || m.Sequence > MaxSequence || !canonicalInt(seq) {
		return Message{}, fmt.Errorf("event %s: %w: extension %s must be an integer from 1 to %d, got %.64q", ce.ID(), ErrBadData, ExtSequence, int64(MaxSequence), seq)
	}
	return m, nil
}

// canonicalUUID reports whether s is a UUID in its 36-character text form,
// the only form the outbox writes.
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

// canonicalInt reports whether s is a decimal integer as FormatInt writes
// it: no sign, no leading zeros.
func canonicalInt(s string) bool {
	return s != "" && s[0] != '+' && s[0] != '-' && (s[0] != '0' || len(s) == 1)
}
