package reclaim

import (
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// Info is what the DLT headers say about a record.
type Info struct {
	Origin    string // pcon.HeaderOriginalTopic; "" when the record is not pcon's
	Partition int32  // pcon.HeaderOriginalPartition; -1 when absent or invalid
	Redrives  int
	Error     string
	DeadSince time.Time // pcon.HeaderDeadLetteredAt, else the record timestamp
}

// Inspect reads a DLT record's headers.
func Inspect(m *sarama.ConsumerMessage) Info {
	info := Info{Partition: -1, DeadSince: m.Timestamp}
	for _, h := range m.Headers {
		if h == nil {
			continue
		}
		v := string(h.Value)
		switch string(h.Key) {
		case pcon.HeaderOriginalTopic:
			info.Origin = v
		case pcon.HeaderOriginalPartition:
			if n, err := strconv.ParseInt(v, 10, 32); err == nil && n >= 0 {
				info.Partition = int32(n)
			}
		case pcon.HeaderError:
			info.Error = v
		case pcon.HeaderDeadLetteredAt:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				info.DeadSince = t
			}
		case HeaderRedriveCount:
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				info.Redrives = n
			}
		}
	}
	return info
}
