package pg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifier sends NOTIFY on a channel after the caller's transaction
// committed, outside it, coalesced: at most one notification is in flight
// per Notifier, and a Notify while one is in flight sends one more after
// it, so that every Notify is followed by a notification sent after the
// call. A writer's transaction therefore never takes PostgreSQL's
// database-wide notify lock (a notifying transaction holds it from
// pre-commit until its commit record is flushed, so notifying writers
// cannot group-commit); only the Notifier's own transactions do, one at a
// time, and they commit asynchronously (synchronous_commit off: a
// notification never waits for a WAL flush, and one lost in a crash costs
// the listener only its poll interval, as a lost connection does).
//
// Notify never blocks and never fails; a notification that cannot be sent
// is counted (Failures) and left to the listener's poll.
type Notifier struct {
	db      *DB
	channel string
	send    func() error // one notification; tests replace it

	mu       sync.Mutex
	conn     *pgx.Conn // the Notifier's own connection, made on first use
	sending  bool
	again    bool
	closed   bool
	idle     *sync.Cond // signalled when a sending run ends
	failures int64
	sent     int64
}

// notifyTimeout bounds one notification, connection included.
const notifyTimeout = 5 * time.Second

// NewNotifier returns a Notifier on channel over a connection of its own
// with db's settings.
func (db *DB) NewNotifier(channel string) *Notifier {
	n := &Notifier{db: db, channel: channel}
	n.send = n.sendDB
	n.idle = sync.NewCond(&n.mu)
	return n
}

// Notify asks for a notification sent after this call.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.sending {
		n.again = true
		return
	}
	n.sending = true
	go n.run()
}

func (n *Notifier) run() {
	for {
		began := time.Now()
		err := n.send()
		n.mu.Lock()
		if err != nil {
			n.failures++
		} else {
			n.sent++
		}
		if !n.again {
			n.sending = false
			n.idle.Broadcast()
			n.mu.Unlock()
			return
		}
		n.again = false
		n.mu.Unlock()
		// Under a stream of commits the listener is busy reading already:
		// more than a notification a millisecond would cost PostgreSQL and
		// the listener CPU for nothing. An idle writer's first commit is
		// not delayed.
		time.Sleep(time.Until(began.Add(minNotifyGap)))
	}
}

// minNotifyGap is the least time between the starts of two notifications
// of one Notifier.
const minNotifyGap = time.Millisecond

// sendDB sends one notification, connecting first when there is no
// connection; on an error it drops the connection so that the next send
// connects afresh.
func (n *Notifier) sendDB() error {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	// Only the sending run touches conn, and one runs at a time.
	if n.conn == nil {
		cfg := n.db.Pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["synchronous_commit"] = "off"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("notify %s: connect: %w", n.channel, MapErr(err))
		}
		n.conn = conn
	}
	if _, err := n.conn.Exec(ctx, "SELECT pg_notify($1, '')", n.channel); err != nil {
		_ = n.conn.Close(context.Background())
		n.conn = nil
		return fmt.Errorf("notify %s: %w", n.channel, MapErr(err))
	}
	return nil
}

// Stats returns how many notifications were sent and how many failed.
func (n *Notifier) Stats() (sent, failed int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sent, n.failures
}

// Close waits for the notifications asked for so far (at most the one in
// flight and one more) and closes the connection. Notify does nothing
// afterwards.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	for n.sending {
		n.idle.Wait()
	}
	conn := n.conn
	n.conn = nil
	n.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
}
