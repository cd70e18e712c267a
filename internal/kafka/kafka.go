// Package kafka holds the Kafka client settings every service shares, so
// that the relay's publisher, product-consumers and the DLT reclaimer speak
// to the brokers the same way.
package kafka

import "github.com/IBM/sarama"

// Version is the Kafka protocol version the clients speak: brokers from 3.6
// on (compose and the manifests run 3.9).
var Version = sarama.V3_6_0_0

// Config returns the base client configuration under clientID: Version,
// and producers that wait for every in-sync replica and report each
// record's outcome (every producer here confirms what it sent before it
// moves on). Callers add what their role needs.
func Config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = Version
	c.ClientID = clientID
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	return c
}
