package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// LastEventIDHeader is how an EventSource resumes a stream.
const LastEventIDHeader = "Last-Event-ID"

// streamWriteTimeout bounds one frame's write: the server's WriteTimeout
// would otherwise end every stream after 30 s, and a client that stops
// reading must not hold its handler forever.
const streamWriteTimeout = 10 * time.Second

// heartbeat keeps proxies from closing an idle stream and finds dead peers.
const heartbeat = 15 * time.Second

// streamEvents serves GET /api/v1/stream as Server-Sent Events.
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	if s.hub == nil {
		return newRequestError(http.StatusServiceUnavailable, "the stream is not enabled on this server")
	}
	var last uint64
	raw := strings.TrimSpace(r.Header.Get(LastEventIDHeader))
	if raw == "" {
		// A new EventSource cannot set the header; the page passes it here.
		raw = strings.TrimSpace(r.URL.Query().Get("lastEventId"))
	}
	if raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return &ValidationError{Fields: []FieldError{{Pointer: LastEventIDHeader, Detail: "must be an event id this stream sent (a non-negative integer), got " + strconv.Quote(raw)}}}
		}
		last = n
	}
	sub, err := s.hub.Subscribe(r.Context(), last)
	if err != nil {
		if errors.Is(err, stream.ErrTooManyStreams) || errors.Is(err, stream.ErrClosed) {
			w.Header().Set("Retry-After", "5")
		}
		return err
	}
	defer s.hub.Unsubscribe(sub)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// The browser's reconnection delay after the stream ends.
	if err := writeFrame(w, rc, []byte("retry: 1000\n\n")); err != nil {
		return nil
	}
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		var f []byte
		select {
		case <-r.Context().Done():
			return nil
		case <-sub.Gone():
			// Dropped (too slow) or shutting down: ending the response
			// makes the client reconnect with its Last-Event-ID.
			return nil
		case <-beat.C:
			f = []byte(": keep-alive\n\n")
		case f = <-sub.Frames():
		}
		if err := writeFrame(w, rc, f); err != nil {
			return nil // the client is gone; nothing to answer
		}
	}
}

func writeFrame(w http.ResponseWriter, rc *http.ResponseController, f []byte) error {
	if err := rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil {
		return err
	}
	if _, err := w.Write(f); err != nil {
		return err
	}
	return rc.Flush()
}
