package pg

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// Listen LISTENs on channel on a dedicated connection and calls notify for
// every notification, and once after each (re)connection since notifications
// sent while disconnected are lost. A lost connection is logged and
// re-established with exponential backoff. It returns when ctx ends.
func (db *DB) Listen(ctx context.Context, logger *slog.Logger, channel string, notify func()) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, channel, notify, func() { backoff = minBackoff })
		if ctx.Err() != nil {
			return
		}
		logger.Warn("lost the LISTEN connection; reconnecting", "channel", channel, logkey.Err, err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (db *DB) listenOnce(ctx context.Context, channel string, notify, connected func()) error {
	conn, err := db.Connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", MapErr(err))
	}
	connected()
	notify()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", MapErr(err))
		}
		notify()
	}
}
