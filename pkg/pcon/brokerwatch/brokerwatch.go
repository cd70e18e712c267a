// Package brokerwatch gives up a sarama client's requests to a Kafka broker
// that stopped answering (a frozen process, a hung machine) within seconds,
// instead of the client's one read timeout.
//
// sarama gives every request on a connection the same Net.ReadTimeout, and
// a consumer group needs it long: the coordinator holds a JoinGroup answer
// until every member has rejoined, up to the rebalance timeout, so a read
// timeout below that makes a joining member give up and join again, over
// and over. With that timeout a fetch, heartbeat or offset commit sent to a
// broker that stopped answering waits it out too (rebalance timeout plus
// some), long after Kafka fenced the broker and moved its partitions'
// leadership and the group coordinator elsewhere: the client learns of the
// move only once the request fails.
//
// A Watcher tells "silent" from "slow to answer because there is nothing
// to say yet" by asking the broker itself on a connection of its own: every
// Interval it sends each broker the client knows an ApiVersions request,
// which a live broker answers at once. A broker that has not answered
// within Timeout is silent: the Watcher closes every connection the client
// holds to it (the requests waiting on them fail and the client looks for
// another leader or coordinator), and refuses new ones, until the broker
// answers a probe again. A JoinGroup held by a live coordinator is left to
// take as long as it needs.
//
// A probe that fails at once (the connection refused or reset: a broker
// stopped, or restarting) does not make a broker silent, and ends its
// silence: the client's own requests fail as fast there, and refusing its
// dials would only keep it from the broker for a probe interval after the
// broker is back.
package brokerwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// Defaults of Options: a broker silent for DefaultTimeout has its requests
// given up; Kafka itself fences a broker after 9 s without a heartbeat
// (broker.session.timeout.ms), so the client has let go before the
// partitions move.
const (
	DefaultInterval = time.Second
	DefaultTimeout  = 3 * time.Second
)

// Options tune a Watcher. Zero values take the defaults.
type Options struct {
	// Interval is the time between the starts of two probes of a broker.
	Interval time.Duration
	// Timeout is how long a broker may take to answer a probe before its
	// connections are closed.
	Timeout time.Duration
	// Logger receives a warning when a broker goes silent and a note when
	// it answers again.
	Logger *slog.Logger
}

// dialer is sarama's Net.Proxy.Dialer.
type dialer interface {
	Dial(network, address string) (net.Conn, error)
}

// ErrSilent is returned by the Watcher's dialer for a broker that did not
// answer its last probe.
var ErrSilent = errors.New("brokerwatch: broker did not answer its last probe")

// errNoAnswer marks a probe that failed for want of an answer within
// Timeout, as opposed to one the broker's host turned down at once.
var errNoAnswer = errors.New("no answer")

// Watcher watches the brokers of one sarama configuration. Make it with
// New, start it with Run, and build the client from the configuration New
// was given.
type Watcher struct {
	opts   Options
	dialer dialer           // the configuration's own
	probe  *sarama.Config   // the client's, with the probe's timeouts
	mu     sync.Mutex       // guards below
	addrs  map[string]*addr // by host:port, once dialled
	closed bool             // Run is returning
}

// addr is the state of one broker address.
type addr struct {
	address string
	conns   map[*conn]struct{}
	silent  bool
	broker  *sarama.Broker // the probe's client, reopened after a failure
	raw     net.Conn       // the probe's connection, closed to end a probe at once
}

// New installs a Watcher's dialer in cfg (Net.Proxy, wrapping a dialer
// already set there) and returns the Watcher. cfg must not be used by a
// client yet; its timeouts and security settings also serve the probes.
func New(cfg *sarama.Config, opts Options) *Watcher {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{opts: opts, addrs: map[string]*addr{}}
	if cfg.Net.Proxy.Enable && cfg.Net.Proxy.Dialer != nil {
		w.dialer = cfg.Net.Proxy.Dialer
	} else {
		w.dialer = &net.Dialer{Timeout: cfg.Net.DialTimeout, KeepAlive: cfg.Net.KeepAlive, LocalAddr: cfg.Net.LocalAddr}
	}
	probe := *cfg
	probe.Net.DialTimeout = opts.Timeout
	probe.Net.ReadTimeout = opts.Timeout
	probe.Net.WriteTimeout = opts.Timeout
	probe.Net.Proxy.Enable = true
	probe.Net.Proxy.Dialer = probeDialer{w}
	w.probe = &probe
	cfg.Net.Proxy.Enable = true
	cfg.Net.Proxy.Dialer = w
	return w
}

// Dial connects to a broker for the client, unless the broker is silent.
func (w *Watcher) Dial(network, address string) (net.Conn, error) {
	w.mu.Lock()
	a := w.addr(address)
	silent := a.silent
	w.mu.Unlock()
	if silent {
		return nil, fmt.Errorf("%w: %s", ErrSilent, address)
	}
	c, err := w.dialer.Dial(network, address)
	if err != nil {
		return nil, fmt.Errorf("brokerwatch: dial %s: %w", address, err)
	}
	wc := &conn{Conn: c, w: w, address: address}
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.silent { // went silent while this dial was under way
		_ = c.Close()
		return nil, fmt.Errorf("%w: %s", ErrSilent, address)
	}
	a.conns[wc] = struct{}{}
	return wc, nil
}

// addr returns the state of address, made on first use. w.mu is held.
func (w *Watcher) addr(address string) *addr {
	a, ok := w.addrs[address]
	if !ok {
		a = &addr{address: address, conns: map[*conn]struct{}{}}
		w.addrs[address] = a
	}
	return a
}

// Silent reports whether the broker at address failed its last probe.
func (w *Watcher) Silent(address string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.addrs[address]
	return ok && a.silent
}

// Run probes every broker dialled so far until ctx ends. It returns once
// its probes have ended (one under way is cut short) and their connections
// are closed.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	inFlight := map[string]bool{}
	done := make(chan string)
	tick := time.NewTicker(w.opts.Interval)
	defer func() {
		tick.Stop()
		w.mu.Lock()
		w.closed = true
		for _, a := range w.addrs {
			if a.raw != nil {
				_ = a.raw.Close()
			}
		}
		w.mu.Unlock()
		wg.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, a := range w.addrs {
			if a.broker != nil {
				_ = a.broker.Close()
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case address := <-done:
			delete(inFlight, address)
		case <-tick.C:
			w.mu.Lock()
			for address, a := range w.addrs {
				if inFlight[address] {
					continue // a probe still waiting is the one that counts
				}
				inFlight[address] = true
				wg.Go(func() {
					w.check(a)
					select {
					case done <- address:
					case <-ctx.Done():
					}
				})
			}
			w.mu.Unlock()
		}
	}
}

// check probes one broker and acts on the answer.
func (w *Watcher) check(a *addr) {
	address := a.address
	err := w.ask(a)
	unanswered := errors.Is(err, errNoAnswer)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed: // the probe was cut short, not answered
	case unanswered && !a.silent:
		a.silent = true
		w.opts.Logger.Warn("brokerwatch: broker silent, giving up its requests", "broker", address, "conns", len(a.conns), "timeout", w.opts.Timeout, "error", err)
		for c := range a.conns {
			// The connection itself, not sarama's Broker.Close: that waits
			// for the request under way, which is what must not be waited
			// for.
			_ = c.Conn.Close()
			delete(a.conns, c)
		}
	case !unanswered && a.silent:
		a.silent = false
		w.opts.Logger.Info("brokerwatch: broker answers again", "broker", address, "error", err)
	}
}

// timedOut reports whether err is a dial or read that ran out of time, not
// one the broker's host answered with a refusal or a reset.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// ask sends the broker an ApiVersions request on the probe's connection
// and waits for the answer up to Timeout. A failure for want of an answer
// wraps errNoAnswer.
func (w *Watcher) ask(a *addr) error {
	address := a.address
	w.mu.Lock()
	b := a.broker
	if b == nil {
		b = sarama.NewBroker(address)
		a.broker = b
	}
	w.mu.Unlock()
	answered := make(chan error, 1)
	go func() {
		if ok, _ := b.Connected(); !ok {
			if err := b.Open(w.probe); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
				answered <- fmt.Errorf("open: %w", err)
				return
			}
		}
		_, err := b.ApiVersions(&sarama.ApiVersionsRequest{})
		answered <- err
	}()
	timer := time.NewTimer(w.opts.Timeout)
	defer timer.Stop()
	select {
	case err := <-answered:
		if err != nil {
			_ = b.Close()
			if timedOut(err) { // the probe's own dial or read timeout, a hair before the timer
				return fmt.Errorf("probe %s: %w: %w", address, errNoAnswer, err)
			}
			return fmt.Errorf("probe %s: %w", address, err)
		}
		return nil
	case <-timer.C:
		// End the probe now: its connection closed, the request fails at
		// once (or the dial under way ends within Timeout).
		w.mu.Lock()
		if a.raw != nil {
			_ = a.raw.Close()
		}
		w.mu.Unlock()
		if err := <-answered; err != nil {
			w.opts.Logger.Debug("brokerwatch: probe cut short", "broker", address, "error", err)
		}
		_ = b.Close()
		return fmt.Errorf("probe %s: %w within %s", address, errNoAnswer, w.opts.Timeout)
	}
}

// probeDialer dials the probes' connections and keeps the last of each
// broker, so that a probe can be cut short.
type probeDialer struct{ w *Watcher }

// Dial connects a probe to a broker.
func (d probeDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.w.dialer.Dial(network, address)
	if err != nil {
		return nil, fmt.Errorf("brokerwatch: probe dial %s: %w", address, err)
	}
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if d.w.closed {
		_ = c.Close()
		return nil, fmt.Errorf("brokerwatch: probe dial %s: watcher stopped", address)
	}
	d.w.addr(address).raw = c
	return c, nil
}

// conn is a client connection the Watcher may close.
type conn struct {
	net.Conn
	w       *Watcher
	address string
	once    sync.Once
}

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.w.mu.Lock()
		defer c.w.mu.Unlock()
		delete(c.w.addr(c.address).conns, c)
	})
	if err := c.Conn.Close(); err != nil {
		return fmt.Errorf("brokerwatch: close %s: %w", c.address, err)
	}
	return nil
}
