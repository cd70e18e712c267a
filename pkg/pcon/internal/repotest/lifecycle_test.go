package pcon_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

func noop(context.Context, *pcon.Record) error { return nil }

// TestCloseReleasesEverything runs a consumer, closes it from several
// goroutines at once, and checks that no goroutine it started survives.
//
//nolint:paralleltest // goleak checks every goroutine of the process: another test's would count as leaked
func TestCloseReleasesEverything(t *testing.T) {
	e := newEnv(t)
	recs := e.produce(2000, keyMod(20))
	group := e.group("lifecycle")
	e.committed(group) // the env's admin client, with its connections, lives until the test ends
	// The cluster, the admin client and the producer's leftovers are not
	// the consumer's.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		// sarama's metrics registry starts a process-wide ticker once.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
	c, err := pcon.New(e.config(group), pcon.RecordHandler(noop))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	e.waitCommitted(group, endOffsets(recs))
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	c.Close()
	if err := c.Run(context.Background()); !errors.Is(err, pcon.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

//nolint:paralleltest // goleak checks every goroutine of the process: another test's would count as leaked
func TestCloseBeforeRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := pcon.New(pcon.Config{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}}, pcon.RecordHandler(noop))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if err := c.Run(context.Background()); !errors.Is(err, pcon.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recs := e.produce(10, keyMod(2))
	group := e.group("twice")
	c, stop := start(t, e.config(group), pcon.RecordHandler(noop))
	e.waitCommitted(group, endOffsets(recs)) // the first Run is under way
	if err := c.Run(context.Background()); !errors.Is(err, pcon.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
	stop()
}
