package events

import (
	"fmt"
	"strings"
)

// typePrefix is the company segment every event type starts with.
const typePrefix = "loopers."

// DLTSuffix is appended to a topic to name its dead-letter topic.
const DLTSuffix = ".DLT"

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
	return parts[0] + "-events", nil
}

// DLTOf names the dead-letter topic of topic.
func DLTOf(topic string) string { return topic + DLTSuffix }

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
