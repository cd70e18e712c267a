package pcon

import (
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// fetched is a record as the control plane holds it until its handler call:
// sarama's message and when it was taken from the fetch.
type fetched struct {
	msg      *sarama.ConsumerMessage
	received time.Time
}

// records recycles the Records handed to handlers. Until its handler call a
// record is sarama's message (a fetched); a Record is built from it for the call and
// taken back afterwards (a handler must not keep it), so records in flight
// or queued behind their key cost no Record, and a busy consumer fills a
// few warm Records instead of a new one per record.
type records struct{ pool sync.Pool }

// get returns a Record of f.
func (rs *records) get(f *fetched) *Record {
	r, _ := rs.pool.Get().(*Record)
	if r == nil {
		r = new(Record)
	}
	fill(r, f)
	return r
}

// put takes r back once its handler call returned.
func (rs *records) put(r *Record) {
	clear(r.headers)
	*r = Record{headers: r.headers[:0]}
	rs.pool.Put(r)
}

// fill makes r the Record of f, reusing r's header array.
func fill(r *Record, f *fetched) {
	m := f.msg
	*r = Record{
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		Key: m.Key, Value: m.Value, Timestamp: m.Timestamp, Received: f.received,
		headers: r.headers[:0],
	}
	if len(m.Headers) > 0 {
		for _, h := range m.Headers {
			r.headers = append(r.headers, Header{Key: h.Key, Value: h.Value})
		}
		r.Headers = r.headers
	}
}
