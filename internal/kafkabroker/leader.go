package kafkabroker

import (
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// PartitionLeader asks the node alone which node leads topic/partition
// (-1: none), so that a test can see a leadership move from a live node
// while another is frozen.
func (n *Node) PartitionLeader(topic string, partition int32) (int, error) {
	b, err := n.open("kafkabroker-leader")
	if err != nil {
		return 0, err
	}
	defer b.Close()
	md, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7, Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("metadata from node %d: %w", n.id, err)
	}
	for _, tm := range md.Topics {
		for _, pm := range tm.Partitions {
			if tm.Name == topic && pm.ID == partition {
				return int(pm.Leader), nil
			}
		}
	}
	return 0, fmt.Errorf("node %d knows no %s/%d", n.id, topic, partition)
}

// GroupCoordinator asks the node alone which node coordinates group.
func (n *Node) GroupCoordinator(group string) (int, error) {
	b, err := n.open("kafkabroker-coordinator")
	if err != nil {
		return 0, err
	}
	defer b.Close()
	co, err := b.FindCoordinator(&sarama.FindCoordinatorRequest{Version: 2, CoordinatorKey: group, CoordinatorType: sarama.CoordinatorGroup})
	if err != nil {
		return 0, fmt.Errorf("coordinator of %s from node %d: %w", group, n.id, err)
	}
	if co.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("coordinator of %s from node %d: %w", group, n.id, co.Err)
	}
	return int(co.Coordinator.ID()), nil
}

// open connects to the node's plain listener alone, with timeouts short
// enough for a poll.
func (n *Node) open(clientID string) (*sarama.Broker, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ClientID = clientID
	cfg.Net.DialTimeout = time.Second
	cfg.Net.ReadTimeout = 2 * time.Second
	b := sarama.NewBroker(n.Addr(PlainListener))
	if err := b.Open(cfg); err != nil {
		return nil, fmt.Errorf("open node %d: %w", n.id, err)
	}
	return b, nil
}

// WaitLeaderMoved asks the node, every 50 ms up to limit, until
// topic/partition has a leader other than node from (a frozen or stopped
// one, which the asked node must not be), and returns it.
func (n *Node) WaitLeaderMoved(topic string, partition int32, from int, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		l, err := n.PartitionLeader(topic, partition)
		if err == nil && l >= 0 && l != from {
			return l, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s/%d still led by node %d after %s (node %d asked; last: leader %d, %w)", topic, partition, from, limit, n.id, l, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Others returns the cluster's nodes but node id.
func (c *Cluster) Others(id int) []*Node {
	return slices.DeleteFunc(c.Nodes(), func(n *Node) bool { return n.id == id })
}
