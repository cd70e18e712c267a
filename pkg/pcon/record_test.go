package pcon

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRecordsReused: a Record taken back and handed out again for another
// message shows that message only, whatever the first had, headers
// included.
func TestRecordsReused(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msgs := []*sarama.ConsumerMessage{
		{Topic: "a", Partition: 1, Offset: 10, Key: []byte("k1"), Value: []byte("v1"), Timestamp: at,
			Headers: []*sarama.RecordHeader{{Key: []byte("h1"), Value: []byte("x")}, {Key: []byte("h2"), Value: []byte("y")}}},
		{Topic: "b", Partition: 2, Offset: 20, Value: []byte("v2")},
		{Topic: "c", Partition: 3, Offset: 30, Key: []byte("k3"), Timestamp: at.Add(time.Second),
			Headers: []*sarama.RecordHeader{{Key: []byte("h3"), Value: []byte("z")}}},
	}
	want := []Record{
		{Topic: "a", Partition: 1, Offset: 10, Key: []byte("k1"), Value: []byte("v1"), Timestamp: at,
			Headers: []Header{{Key: []byte("h1"), Value: []byte("x")}, {Key: []byte("h2"), Value: []byte("y")}}},
		{Topic: "b", Partition: 2, Offset: 20, Value: []byte("v2")},
		{Topic: "c", Partition: 3, Offset: 30, Key: []byte("k3"), Timestamp: at.Add(time.Second),
			Headers: []Header{{Key: []byte("h3"), Value: []byte("z")}}},
	}
	for i := range want {
		want[i].Received = at.Add(time.Duration(i) * time.Minute)
	}
	var rs records
	for round := range 3 {
		for i, m := range msgs {
			r := rs.get(&fetched{msg: m, received: want[i].Received})
			if diff := cmp.Diff(want[i], *r, cmpopts.IgnoreUnexported(Record{})); diff != "" {
				t.Errorf("round %d, message %d (-want +got):\n%s", round, i, diff)
			}
			rs.put(r)
		}
	}
}
