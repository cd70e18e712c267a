package brokerwatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon/brokerwatch"
)

// ownBroker starts a one-node cluster of the test's own and returns its
// node, the node's address and a client configuration for it.
func ownBroker(t *testing.T) (*kafkabroker.Node, string, *sarama.Config) {
	t.Helper()
	node := testenv.KafkaCluster(t, kafkabroker.Options{}).Node(1)
	return node, node.Addr(kafkabroker.PlainListener), kafka.Settings{}.Config("brokerwatch-test")
}

// watched installs a Watcher with opts in cfg, runs it until the test
// ends, and connects a client of cfg to addr (so the Watcher probes addr).
func watched(t *testing.T, cfg *sarama.Config, opts brokerwatch.Options, addr string) (*brokerwatch.Watcher, sarama.Client) {
	t.Helper()
	w := brokerwatch.New(cfg, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	client, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return w, client
}

// TestFrozenBrokerGivenUp freezes (SIGSTOP) a broker of the test's own
// while a client with a minute's read timeout waits on a request to it:
// the request must fail within the Watcher's timeout and interval, new
// connections must be refused while the broker is silent, and once it
// continues (SIGCONT) the client must get answers again.
func TestFrozenBrokerGivenUp(t *testing.T) {
	t.Parallel()
	node, addr, cfg := ownBroker(t)
	cfg.Net.ReadTimeout = time.Minute // what a consumer group's JoinGroup needs
	cfg.Metadata.Retry.Max = 0
	const timeout = time.Second
	w, client := watched(t, cfg, brokerwatch.Options{Interval: 200 * time.Millisecond, Timeout: timeout}, addr)
	b, err := client.Controller() // a broker of the client's, connected
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7}); err != nil {
		t.Fatalf("metadata before the freeze: %v", err)
	}

	if err := node.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Resume() }) // a failed test must not leave it stopped
	at := time.Now()
	_, err = b.GetMetadata(&sarama.MetadataRequest{Version: 7})
	took := time.Since(at)
	if err == nil {
		t.Fatal("a frozen broker answered")
	}
	// The probe under way when the broker froze may have just started: it
	// fails after timeout, the next one's start is at most an interval
	// later. Two seconds more for a loaded machine, far below the minute
	// the read timeout would wait.
	if limit := timeout + 200*time.Millisecond + 2*time.Second; took > limit {
		t.Errorf("the request to the frozen broker failed after %s, want within %s", took, limit)
	}
	t.Logf("request to the frozen broker given up after %s: %v", took.Round(time.Millisecond), err)
	if !w.Silent(addr) {
		t.Errorf("%s not silent after its request was given up", addr)
	}
	if _, err := w.Dial("tcp", addr); !errors.Is(err, brokerwatch.ErrSilent) {
		t.Errorf("Dial of the frozen broker: %v, want ErrSilent", err)
	}

	if err := node.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.Silent(addr) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still silent 30 s after it continued", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = b.Open(cfg) // sarama reopens lazily; the test asks the same broker directly
	if _, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7}); err != nil {
		t.Errorf("metadata after the broker continued: %v", err)
	}
}

// TestStoppedBrokerNotSilent stops a broker of the test's own (SIGTERM: its
// port refuses connections) and starts it again. A broker that turns the
// probes down at once is not silent: the client's own dials fail as fast,
// with the host's refusal, not ErrSilent; and the moment the broker is
// back the client can dial it, without waiting for a probe to succeed.
func TestStoppedBrokerNotSilent(t *testing.T) {
	t.Parallel()
	node, addr, cfg := ownBroker(t)
	const interval, timeout = 200 * time.Millisecond, time.Second
	w, _ := watched(t, cfg, brokerwatch.Options{Interval: interval, Timeout: timeout}, addr)

	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	// Long enough for several probes, and for one that waited out the
	// timeout.
	for end := time.Now().Add(timeout + 3*interval); time.Now().Before(end); time.Sleep(interval / 4) {
		if w.Silent(addr) {
			t.Fatalf("%s silent while it refuses connections", addr)
		}
	}
	if c, err := w.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("Dial of the stopped broker succeeded")
	} else if errors.Is(err, brokerwatch.ErrSilent) {
		t.Fatalf("Dial of the stopped broker: %v, want the connection refused", err)
	}

	startCtx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	if err := node.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	c, err := w.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("Dial of the broker just started: %v", err)
	}
	_ = c.Close()
}
