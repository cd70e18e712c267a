package pcon

import (
	"sync"

	"github.com/IBM/sarama"
)

// records recycles the Records handed to handlers. Until its handler call a
// record is sarama's message; a Record is built from it for the call and
// taken back afterwards (a handler must not keep it), so records in flight
// or queued behind their key cost no Record, and a busy consumer fills a
// few warm Records instead of a new one per record.
type records struct{ pool sync.Pool }

// get returns a Record of m.
func (rs *records) get(m *sarama.ConsumerMessage) *Record {
	r, _ := rs.pool.Get().(*Record)
	if r == nil {
		r = new(Record)
	}
	fill(r, m)
	return r
}

// put takes r back once its handler call returned.
func (rs *records) put(r *Record) {
	clear(r.headers)
	*r = Record{headers: r.headers[:0]}
	rs.pool.Put(r)
}

// fill makes r the Record of m, reusing r's header array.
func fill(r *Record, m *sarama.ConsumerMessage) {
	*r = Record{
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		Key: m.Key, Value: m.Value, Timestamp: m.Timestamp,
		headers: r.headers[:0],
	}
	if len(m.Headers) > 0 {
		for _, h := range m.Headers {
			r.headers = append(r.headers, Header{Key: h.Key, Value: h.Value})
		}
		r.Headers = r.headers
	}
}
