package consumer

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// decode reads a record as a CloudEvent and maps it to a domain event.
// Anything that is not one of ours fails permanently: no retry can make it
// decodable.
//
// The outcome is the CloudEvents SDK's Kafka binding followed by
// Registry.FromCloudEvent, for every record. Reading a record through the
// binding costs more than everything else the consumers do with it (a map
// of the headers, attributes set through interfaces, an extension map), so
// records of the one shape the relay writes are read by readBinary, which
// accepts a record only where the SDK accepts it and returns the same
// Message; anything else, refusals included, goes through the SDK, so that
// what is refused and why stays the SDK's word.
func (h *Handlers) decode(ctx context.Context, r *pcon.Record) (events.Message, error) {
	if n := len(r.Value); n > events.MaxRecordBytes {
		// Refused before decoding: a forged record must not cost the
		// consumer the memory and time to parse it.
		return events.Message{}, pcon.Permanent(fmt.Errorf("%w: record of %d bytes exceeds %d", events.ErrBadData, n, events.MaxRecordBytes))
	}
	if msg, ok := h.readBinary(r); ok {
		return msg, nil
	}
	return h.decodeSDK(ctx, r)
}

// decodeSDK decodes r with the SDK's Kafka binding and the registry.
func (h *Handlers) decodeSDK(ctx context.Context, r *pcon.Record) (events.Message, error) {
	cm := &sarama.ConsumerMessage{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, hd := range r.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: hd.Key, Value: hd.Value})
	}
	ce, err := binding.ToEvent(ctx, kafka_sarama.NewMessageFromConsumerMessage(cm))
	if err != nil {
		return events.Message{}, pcon.Permanent(fmt.Errorf("%w: not a CloudEvent: %w", events.ErrBadData, err))
	}
	msg, err := h.reg.FromCloudEvent(*ce)
	if err != nil {
		return events.Message{}, pcon.Permanent(err)
	}
	return msg, nil
}

// The headers readBinary reads, by the slot it keeps each one's value in.
const (
	slotID = iota
	slotSource
	slotSpecVersion
	slotType
	slotTime
	slotContentType     // the "content-type" header
	slotDataContentType // the "ce_datacontenttype" header
	slotAggregateType
	slotAggregateID
	slotSequence
	slotCount

	slotIgnored = -1 // a header the binding does not read
)

// maxCEName is the length of the longest attribute or extension name
// headerSlot knows.
const maxCEName = len("datacontenttype")

// jsonContentType is the data content type the relay writes.
const jsonContentType = "application/json"

// readBinary reads r as the SDK's Kafka binding and FromCloudEvent would,
// for records in CloudEvents 1.0 binary content mode with only the
// attributes the relay writes, and reports whether it could. It never
// refuses a record: where it cannot be sure the SDK accepts one, with the
// very Message returned here, it returns false and the SDK decides.
//
// What the binding does with a record, and so what this follows: header
// keys are lower-cased and the last of equal keys wins; the binary mode
// is chosen when the last content-type header is not a CloudEvents format
// and the ce_specversion header names a version; the id and type are
// trimmed of white space, the source is parsed as a URI reference and read
// back re-serialized, the time is parsed as RFC 3339; every other "ce_"
// header is an extension whose name must be ASCII letters and digits;
// other headers are ignored; the value is the data, none when empty.
func (h *Handlers) readBinary(r *pcon.Record) (events.Message, bool) {
	var (
		at  [slotCount][]byte
		set [slotCount]bool
	)
	for _, hd := range r.Headers {
		slot, ok := headerSlot(hd.Key)
		if !ok {
			return events.Message{}, false
		}
		if slot != slotIgnored {
			at[slot], set[slot] = hd.Value, true
		}
	}
	// Version 0.3, or none: another set of attributes, or no CloudEvent.
	if string(at[slotSpecVersion]) != "1.0" {
		return events.Message{}, false
	}
	// The binding sets the data content type from both headers in map
	// order, so which one wins varies; the content-type header may also
	// name a format (structured mode). Only the one value the relay
	// writes, in one of them, is read here.
	if set[slotContentType] && set[slotDataContentType] {
		return events.Message{}, false
	}
	if (set[slotContentType] && string(at[slotContentType]) != jsonContentType) ||
		(set[slotDataContentType] && string(at[slotDataContentType]) != jsonContentType) {
		return events.Message{}, false
	}
	// An id with white space around it, or in another of the forms
	// uuid.Parse reads, is left to the SDK (which trims it, and
	// FromCloudEvent then wants the 36-character form).
	id := at[slotID]
	if len(id) != 36 {
		return events.Message{}, false
	}
	if _, err := uuid.ParseBytes(id); err != nil {
		return events.Message{}, false
	}
	et, ok := h.reg.Lookup(at[slotType]) // untrimmed: a type with spaces goes to the SDK
	if !ok || string(at[slotAggregateType]) != et.AggregateType() {
		return events.Message{}, false
	}
	seq, ok := sequence(at[slotSequence])
	if !ok {
		return events.Message{}, false
	}
	if !set[slotSource] {
		return events.Message{}, false
	}
	source, ok := h.readSource(at[slotSource])
	if !ok {
		return events.Message{}, false
	}
	var when time.Time
	if set[slotTime] {
		t, err := time.Parse(time.RFC3339Nano, string(at[slotTime]))
		if err != nil {
			return events.Message{}, false
		}
		// The SDK keeps no time for the zero instant, whatever its
		// zone, and reads it back as time.Time{}.
		if !t.IsZero() {
			when = t
		}
	}
	if len(r.Value) == 0 {
		return events.Message{}, false
	}
	ev, err := et.Decode(r.Value)
	if err != nil {
		return events.Message{}, false
	}
	aggID := et.AggregateID(ev)
	if string(at[slotAggregateID]) != aggID {
		return events.Message{}, false
	}
	return events.Message{ID: string(id), Type: et.Name(), Source: source, Time: when,
		AggregateType: et.AggregateType(), AggregateID: aggID, Sequence: seq, Event: ev}, true
}

// headerSlot returns the slot of the header key, slotIgnored for a header
// the binding ignores or reads as an extension FromCloudEvent does not
// look at, and false for one readBinary leaves to the SDK.
func headerSlot(key []byte) (int, bool) {
	for _, c := range key {
		// strings.ToLower maps some non-ASCII letters to ASCII ones (the
		// Kelvin sign to k, İ to i) and invalid UTF-8 to U+FFFD: such
		// keys are the SDK's to read.
		if c >= utf8.RuneSelf {
			return 0, false
		}
	}
	if len(key) < 3 || lower(key[0]) != 'c' || lower(key[1]) != 'e' || key[2] != '_' {
		if equalFold(key, "content-type") {
			return slotContentType, true
		}
		return slotIgnored, true
	}
	name := key[3:]
	if len(name) <= maxCEName {
		var buf [maxCEName]byte
		for i, c := range name {
			buf[i] = lower(c)
		}
		switch string(buf[:len(name)]) {
		case "id":
			return slotID, true
		case "source":
			return slotSource, true
		case "specversion":
			return slotSpecVersion, true
		case "type":
			return slotType, true
		case "time":
			return slotTime, true
		case "datacontenttype":
			return slotDataContentType, true
		case events.ExtAggregateType:
			return slotAggregateType, true
		case events.ExtAggregateID:
			return slotAggregateID, true
		case events.ExtSequence:
			return slotSequence, true
		case "dataschema", "subject":
			// Attributes the relay never writes, each with rules of
			// its own: the SDK reads them.
			return 0, false
		}
	}
	// An extension: the SDK refuses a name that is empty or has anything
	// but ASCII letters and digits.
	if len(name) == 0 {
		return 0, false
	}
	for _, c := range name {
		if !alnum(c) {
			return 0, false
		}
	}
	return slotIgnored, true
}

// sequence reads the sequence extension as FromCloudEvent accepts it: a
// decimal integer from 1 to MaxSequence as strconv.FormatInt writes it.
func sequence(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > len("9007199254740992") || b[0] == '0' {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n <= events.MaxSequence
}

// parsedSource is a source attribute as it came and as the SDK reads it.
type parsedSource struct{ raw, source string }

// readSource returns the source as the SDK reads it: parsed as a URI
// reference and written back, which escapes or rewrites some sources.
// Every event of a service carries the same source, so the last one read
// is remembered and the next records' need no parsing.
func (h *Handlers) readSource(raw []byte) (string, bool) {
	if p := h.source.Load(); p != nil && string(raw) == p.raw {
		return p.source, true
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		return "", false
	}
	p := &parsedSource{raw: string(raw), source: u.String()}
	if strings.TrimSpace(p.source) == "" { // Validate refuses it
		return "", false
	}
	h.source.Store(p)
	return p.source, true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// equalFold reports whether the ASCII key is s, whose letters are lower
// case, ignoring case.
func equalFold(key []byte, s string) bool {
	if len(key) != len(s) {
		return false
	}
	for i := range key {
		if lower(key[i]) != s[i] {
			return false
		}
	}
	return true
}
