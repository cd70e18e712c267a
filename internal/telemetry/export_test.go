package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// Off turns tracing off for t, as in a process that installed nothing, and
// puts back what was installed when t ends: a test of Setup then starts
// from a fresh process's state whatever ran before it (Setup and Install
// change the process's globals), and leaves nothing behind for the tests
// after it.
func Off(t testing.TB) {
	t.Helper()
	tp, prop, on := otel.GetTracerProvider(), otel.GetTextMapPropagator(), enabled.Load()
	otel.SetTracerProvider(noop.NewTracerProvider())
	enabled.Store(false)
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
		enabled.Store(on)
	})
}
