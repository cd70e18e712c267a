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
	last, err := lastEventID(r)
	if err != nil {
		return err
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

// maxEventIDDigits bounds an event id as the document does: every id of 19
// digits fits in a uint64.
const maxEventIDDigits = 19

// lastEventID is the id a stream resumes after: the Last-Event-ID header,
// else the lastEventId query parameter (a new EventSource cannot set the
// header; the page passes it there); 0 when neither is set or the one that
// counts is empty, which EventSource sends for "none". Each that is sent
// must be an id, even when the header makes the query's moot.
func lastEventID(r *http.Request) (uint64, error) {
	var errs ValidationError
	header, fromHeader := parseEventID(strings.TrimSpace(r.Header.Get(LastEventIDHeader)), LastEventIDHeader, &errs)
	var query uint64
	switch vals := r.URL.Query()["lastEventId"]; len(vals) {
	case 0:
	case 1:
		query, _ = parseEventID(vals[0], "lastEventId", &errs)
	default:
		errs.add("lastEventId", "must be given once")
	}
	if err := errs.check(); err != nil {
		return 0, err
	}
	if fromHeader {
		return header, nil
	}
	return query, nil
}

// parseEventID parses raw, an event id or empty, noting in errs what is
// wrong with it; ok says it was a non-empty id.
func parseEventID(raw, name string, errs *ValidationError) (id uint64, ok bool) {
	if raw == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(raw, 10, 64) // no sign, no underscores
	if err != nil || len(raw) > maxEventIDDigits {
		errs.add(name, "must be an event id this stream sent (at most 19 decimal digits), got "+quoteShort(raw))
		return 0, false
	}
	return n, true
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
