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
	Reason    string    // pcon.HeaderReason: why pcon dead-lettered it
	DeadSince time.Time // pcon.HeaderDeadLetteredAt, else the record timestamp
	EventTime time.Time // when the event happened (CloudEvents' time); zero when absent
}

// headerEventTime is the CloudEvents time attribute in binary mode.
const headerEventTime = "ce_time"

// Permanent reports whether the record was dead-lettered for a reason no
// re-drive can heal: the handler refused it as data (pcon.ReasonPermanent)
// or the overflow policy refused it on arrival (pcon.ReasonKeyQueueFull).
func (i Info) Permanent() bool {
	return i.Reason == pcon.ReasonPermanent || i.Reason == pcon.ReasonKeyQueueFull
}

// Inspect reads a DLT record's headers. A dead-lettered time in the future
// (a producer's clock ahead, a forged header) would make the record look
// younger than MinIdle on every pass, and hold its whole partition back
// for good: the record's own timestamp is used instead, or, when that is in
// the future too, the record counts as old enough.
func Inspect(m *sarama.ConsumerMessage) Info {
	info := inspect(m)
	if now := time.Now(); info.DeadSince.After(now) {
		info.DeadSince = m.Timestamp
		if info.DeadSince.After(now) {
			info.DeadSince = time.Time{}
		}
	}
	return info
}

func inspect(m *sarama.ConsumerMessage) Info {
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
		case pcon.HeaderReason:
			info.Reason = v
		case pcon.HeaderDeadLetteredAt:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				info.DeadSince = t
			}
		case headerEventTime:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				info.EventTime = t
			}
		case HeaderRedriveCount:
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				info.Redrives = n
			}
		}
	}
	return info
}
