package process_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/process"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

var quiet = slog.New(slog.DiscardHandler)

var errBoom = errors.New("boom")

// served adds a listener to p and returns its address once it listens.
func served(t *testing.T, p *process.Process, name string, start func()) string {
	t.Helper()
	ready := make(chan string, 1)
	p.Serve(name, "127.0.0.1:0", http.NotFoundHandler(), ready)
	start()
	select {
	case addr := <-ready:
		return addr
	case <-time.After(10 * time.Second):
		t.Fatalf("%s does not listen", name)
		return ""
	}
}

// runAsync starts p.Run(ctx) and returns the channel of its result.
func runAsync(ctx context.Context, p *process.Process) chan error {
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// refused reports whether nothing listens on addr any more.
func refused(addr string) bool {
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if err == nil {
		_ = c.Close()
	}
	return err != nil
}

// TestFirstFailureStopsTheRest: a component that fails stops a listener
// serving meanwhile, and Run returns its error, under its name.
func TestFirstFailureStopsTheRest(t *testing.T) {
	t.Parallel()
	p := process.New(quiet)
	fail := make(chan struct{})
	p.Go("worker", func(context.Context) error {
		<-fail
		return errBoom
	})
	var done chan error
	addr := served(t, p, "admin", func() { done = runAsync(context.Background(), p) })
	close(fail)
	err := wait(t, done)
	if !errors.Is(err, errBoom) {
		t.Fatalf("Run returned %v, want the worker's error", err)
	}
	if got, want := err.Error(), "worker: boom"; got != want {
		t.Errorf("Run's error reads %q, want %q", got, want)
	}
	if !refused(addr) {
		t.Errorf("the admin listener on %s still accepts connections after Run returned", addr)
	}
}

// TestCleanReturnStopsTheRest: a component that returns nil before the
// process is stopped stops the others too, and Run returns nil.
func TestCleanReturnStopsTheRest(t *testing.T) {
	t.Parallel()
	p := process.New(quiet)
	end := make(chan struct{})
	p.Go("short-lived", func(context.Context) error { <-end; return nil })
	var done chan error
	addr := served(t, p, "admin", func() { done = runAsync(context.Background(), p) })
	close(end)
	if err := wait(t, done); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	if !refused(addr) {
		t.Errorf("the admin listener on %s still accepts connections", addr)
	}
}

// TestCancelIsACleanStop: when ctx ends, every component returns nil and
// so does Run.
func TestCancelIsACleanStop(t *testing.T) {
	t.Parallel()
	p := process.New(quiet)
	var stopped sync.WaitGroup
	stopped.Add(2)
	for _, name := range []string{"a", "b"} {
		p.Go(name, func(ctx context.Context) error {
			defer stopped.Done()
			<-ctx.Done()
			return nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var done chan error
	served(t, p, "admin", func() { done = runAsync(ctx, p) })
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatalf("Run returned %v after a cancel, want nil", err)
	}
	stopped.Wait() // Run returned: both must have returned already
}

// TestEveryErrorIsKeptFirstFirst: errors of components that fail while
// stopping follow the one that stopped the process.
func TestEveryErrorIsKeptFirstFirst(t *testing.T) {
	t.Parallel()
	p := process.New(quiet)
	p.Go("first", func(context.Context) error { return errBoom })
	errLate := errors.New("late")
	p.Go("second", func(ctx context.Context) error {
		<-ctx.Done()
		return errLate
	})
	err := p.Run(context.Background())
	if !errors.Is(err, errBoom) || !errors.Is(err, errLate) {
		t.Fatalf("Run returned %v, want both errors", err)
	}
	if diff := cmp.Diff("first: boom\nsecond: late", err.Error()); diff != "" {
		t.Errorf("Run's error (-want +got):\n%s", diff)
	}
}

// TestListenFailureStopsTheProcess: a listener that cannot bind (the port
// is taken) ends Run at once with the listen error.
func TestListenFailureStopsTheProcess(t *testing.T) {
	t.Parallel()
	taken, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	p := process.New(quiet)
	p.Serve("admin", taken.Addr().String(), http.NotFoundHandler(), nil)
	p.Go("worker", func(ctx context.Context) error { <-ctx.Done(); return nil })
	err = wait(t, runAsync(context.Background(), p))
	if err == nil || !strings.HasPrefix(err.Error(), "admin: listen on "+taken.Addr().String()) {
		t.Fatalf("Run returned %v, want the admin listener's listen error", err)
	}
}

// TestComponentIgnoringTheStopIsWaitedForAndNamed: Run does not return
// while a component has not (what runs after Run, such as leaving the
// cluster, must come after the work stopped), and it names that component
// in a warning each SlowStop.
func TestComponentIgnoringTheStopIsWaitedForAndNamed(t *testing.T) {
	t.Parallel()
	var logs testenv.LogBuffer
	p := process.New(slog.New(slog.NewJSONHandler(&logs, nil)))
	p.SlowStop = 50 * time.Millisecond
	release := make(chan struct{})
	p.Go("stubborn", func(context.Context) error { <-release; return nil })
	p.Go("polite", func(ctx context.Context) error { <-ctx.Done(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, p)
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), `"components":["stubborn"]`) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming the stubborn component; logs: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while a component still ran", err)
	default:
	}
	close(release)
	if err := wait(t, done); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
}

// TestNothingToRun: a Process without components is a wiring mistake.
func TestNothingToRun(t *testing.T) {
	t.Parallel()
	if err := process.New(quiet).Run(context.Background()); err == nil {
		t.Fatal("Run of an empty Process returned nil")
	}
}

// TestRegistryHasTheRuntimeCollectors: every service exposes the Go and
// process series without registering them itself.
func TestRegistryHasTheRuntimeCollectors(t *testing.T) {
	t.Parallel()
	mfs, err := process.New(quiet).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"go_goroutines": false, "process_cpu_seconds_total": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; ok {
			want[mf.GetName()] = true
		}
	}
	if diff := cmp.Diff(map[string]bool{"go_goroutines": true, "process_cpu_seconds_total": true}, want); diff != "" {
		t.Errorf("series found (-want +got):\n%s", diff)
	}
}

// nodeStatus is the status of node id in the cluster view, "" when the
// registry has no such node.
func nodeStatus(t *testing.T, url, id string) string {
	t.Helper()
	st, err := cluster.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := st.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range v.Nodes {
		if n.ID == id {
			return n.Status
		}
	}
	return ""
}

// TestJoinedProcessHeartbeatsWhileRunningAndLeavesOnClose: Run starts the
// heartbeat (the node turns ALIVE) and Close, after Run, leaves.
func TestJoinedProcessHeartbeatsWhileRunningAndLeavesOnClose(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	p := process.New(quiet)
	cfg := cluster.Defaults("node-run")
	cfg.HeartbeatInterval = 50 * time.Millisecond
	if _, err := p.Join(url, cfg, cluster.Info{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Join(url, cfg, cluster.Info{Service: "svc"}); err == nil {
		t.Error("a second Join was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Go("worker", func(ctx context.Context) error { <-ctx.Done(); return nil })
	done := runAsync(ctx, p)
	deadline := time.Now().Add(10 * time.Second)
	for nodeStatus(t, url, "node-run") != "ALIVE" {
		if time.Now().After(deadline) {
			t.Fatal("the node never turned ALIVE while the process ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if got := nodeStatus(t, url, "node-run"); got != "LEFT" {
		t.Errorf("status after Close: %q, want LEFT", got)
	}
}

// TestCloseWithoutRunWritesNothing: a start-up that fails after Join
// leaves no trace of the node in the registry.
func TestCloseWithoutRunWritesNothing(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	p := process.New(quiet)
	if _, err := p.Join(url, cluster.Defaults("node-never"), cluster.Info{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if got := nodeStatus(t, url, "node-never"); got != "" {
		t.Errorf("status of a node that never ran: %q, want none", got)
	}
}
