package pcon

import (
	"time"

	"github.com/IBM/sarama"
)

// fetched is a record as the control plane holds it until its handler call:
// sarama's message and when it was taken from the fetch.
type fetched struct {
	msg      *sarama.ConsumerMessage
	received time.Time
}

// Records are built for a handler call and never reused: a handler that
// keeps a *Record (in a cache, a goroutine, a later batch) keeps that
// record's data. Until its handler call a record is sarama's message (a
// fetched), so records in flight or queued behind their key cost no Record;
// the call's Records come in as few allocations as the call allows.

// newRecord returns the Record of f, for one handler call.
func newRecord(f *fetched) *Record {
	r := new(Record)
	fill(r, f, nil)
	return r
}

// newRecords returns the Records of fs, for one batch handler call: one
// array of Records and one of headers for the whole batch.
func newRecords(fs []*fetched) []*Record {
	n := 0
	for _, f := range fs {
		n += len(f.msg.Headers)
	}
	arr := make([]Record, len(fs))
	headers := make([]Header, 0, n)
	out := make([]*Record, len(fs))
	for i, f := range fs {
		headers = fill(&arr[i], f, headers)
		out[i] = &arr[i]
	}
	return out
}

// fill makes r the Record of f, its headers appended to headers (nil:
// an array of r's own); it returns headers with r's appended. Headers is
// capped so that a handler appending to it cannot write into another
// record's headers.
func fill(r *Record, f *fetched, headers []Header) []Header {
	m := f.msg
	*r = Record{
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		Key: m.Key, Value: m.Value, Timestamp: m.Timestamp, Received: f.received,
	}
	if len(m.Headers) == 0 {
		return headers
	}
	if headers == nil {
		headers = make([]Header, 0, len(m.Headers))
	}
	start := len(headers)
	for _, h := range m.Headers {
		headers = append(headers, Header{Key: h.Key, Value: h.Value})
	}
	r.Headers = headers[start:len(headers):len(headers)]
	return headers
}
