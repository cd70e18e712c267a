package pcon

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
)

// recordCases are sarama messages and the Records they make.
func recordCases() ([]*fetched, []Record) {
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
	fs := make([]*fetched, len(msgs))
	for i, m := range msgs {
		want[i].Received = at.Add(time.Duration(i) * time.Minute)
		fs[i] = &fetched{msg: m, received: want[i].Received}
	}
	return fs, want
}

// TestRecordsKept: the Records of handler calls, kept after later calls'
// Records were built, still show their own message, headers included; a
// handler appending to a batch record's headers does not write into its
// neighbour's.
func TestRecordsKept(t *testing.T) {
	t.Parallel()
	fs, want := recordCases()
	var kept []*Record
	for range 3 {
		for _, f := range fs {
			kept = append(kept, newRecord(f))
		}
		batch := newRecords(fs)
		kept = append(kept, batch...)
		batch[0].Headers = append(batch[0].Headers, Header{Key: []byte("added")})
		batch[0].Headers = batch[0].Headers[:len(want[0].Headers)]
	}
	for i, r := range kept {
		if diff := cmp.Diff(want[i%len(want)], *r); diff != "" {
			t.Errorf("kept record %d (-want +got):\n%s", i, diff)
		}
	}
}

// TestScratchRecord: the key resolver's Record, filled again for each
// message, shows that message only, whatever the previous one had.
func TestScratchRecord(t *testing.T) {
	t.Parallel()
	fs, want := recordCases()
	var scratch Record
	for round := range 3 {
		for i, f := range fs {
			fill(&scratch, f, scratch.Headers[:0])
			if diff := cmp.Diff(want[i], scratch); diff != "" {
				t.Errorf("round %d, message %d (-want +got):\n%s", round, i, diff)
			}
		}
	}
}
