package events

// EventType is one registered event type, for a reader that takes records
// apart itself instead of building a CloudEvent for
// [Registry.FromCloudEvent]: its Decode and AggregateID are exactly the
// payload decoding and the aggregate FromCloudEvent checks the extensions
// against, so such a reader can accept the same events without repeating
// the registry's rules.
type EventType struct{ e entry }

// Lookup returns the registered type named typ, compared byte for byte
// (FromCloudEvent compares the type attribute, which the CloudEvents SDK
// trims of white space first). It allocates nothing, so a reader can look
// a type up from a record header as it is.
func (r *Registry) Lookup(typ []byte) (EventType, bool) {
	e, ok := r.byType[string(typ)]
	return EventType{e}, ok
}

// Name is the CloudEvents type.
func (t EventType) Name() string { return t.e.typ }

// AggregateType is the aggregate type of the type's events, the value
// their aggregatetype extension must have.
func (t EventType) AggregateType() string { return t.e.aggregateType }

// Decode decodes and validates data of this type, as
// [Registry.Unmarshal] does. Errors match [ErrBadData].
func (t EventType) Decode(data []byte) (any, error) { return t.e.decode(data) }

// AggregateID returns the aggregate id of ev, a value Decode returned: the
// value its event's aggregateid extension must have.
func (t EventType) AggregateID(ev any) string { return t.e.aggregateID(ev) }
