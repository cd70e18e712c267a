package events

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// typePrefix is the company segment every event type starts with.
const typePrefix = "loopers."

// DLTSuffix is appended to a topic to name its dead-letter topic.
const DLTSuffix = ".DLT"

// ParkedSuffix is appended to a topic to name its parked topic: where the
// reclaimer moves dead letters it will not re-drive by itself, kept much
// longer than the dead-letter topic (ParkedRetention) so that an operator
// can still re-drive them (pipelinectl parked).
const ParkedSuffix = ".PARKED"

// ParkedRetention is how long parked topics keep their records (90 days;
// the dead-letter topics keep theirs 7).
const ParkedRetention = 90 * 24 * time.Hour

// topicSuffix ends the name of every event topic: "{domain}-events".
const topicSuffix = "-events"

// DomainTopic names the topic of a domain's events: "like" → "like-events".
func DomainTopic(domain string) string { return domain + topicSuffix }

// DomainOf names the domain of an event topic, the inverse of DomainTopic:
// "like-events" → "like". Logs and metrics label topics by it.
func DomainOf(topic string) string { return strings.TrimSuffix(topic, topicSuffix) }

// TopicFor returns the topic events of ev's Go type (one of this package's
// domain events, passed by value) are published to.
func (r *Registry) TopicFor(ev any) (string, error) {
	e, ok := r.byGo[reflect.TypeOf(ev)]
	if !ok {
		return "", fmt.Errorf("%T: %w", ev, ErrUnknownType)
	}
	return TopicOf(e.typ)
}

// TopicOf derives the Kafka topic of an event type by convention:
// "loopers.{domain}.{action}.v{n}" is published to "{domain}-events".
func TopicOf(eventType string) (string, error) {
	rest, ok := strings.CutPrefix(eventType, typePrefix)
	if !ok {
		return "", fmt.Errorf("event type %q: want prefix %q: %w", eventType, typePrefix, ErrUnknownType)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !validVersion(parts[2]) {
		return "", fmt.Errorf("event type %q: want loopers.{domain}.{action}.v{n}: %w", eventType, ErrUnknownType)
	}
	return DomainTopic(parts[0]), nil
}

// DLTOf names the dead-letter topic of topic.
func DLTOf(topic string) string { return topic + DLTSuffix }

// ParkedOf names the parked topic of topic.
func ParkedOf(topic string) string { return topic + ParkedSuffix }

func validVersion(s string) bool {
	digits, ok := strings.CutPrefix(s, "v")
	if !ok || digits == "" {
		return false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
