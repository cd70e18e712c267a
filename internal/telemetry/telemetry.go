// Package telemetry sets up OpenTelemetry tracing for every binary of the
// pipeline from the standard OTEL_* variables only, and holds what the
// services' spans share: the semantic-convention release they follow, the
// stability opt-in, the messaging attributes and the database tracer.
//
// Without an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or with OTEL_SDK_DISABLED=true,
// Setup installs nothing: the global tracer provider stays OpenTelemetry's
// no-op one, Enabled reports false, and the services leave their handlers
// and pools unwrapped, so tracing off costs nothing.
//
// With an endpoint the SDK samples parent-based (OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG choose another sampler), batches spans to the
// OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the default,
// or grpc; OTEL_EXPORTER_OTLP_HEADERS and the exporter's other standard
// variables are read by the exporter), names the service from
// OTEL_SERVICE_NAME or the binary's name, adds OTEL_RESOURCE_ATTRIBUTES,
// and propagates W3C trace context and baggage.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// SchemaURL is the semantic-conventions release every span of the pipeline
// follows (semconv v1.43.0, the newest the Go SDK in go.mod ships).
const SchemaURL = semconv.SchemaURL

// InstrumentationName is the instrumentation scope of the pipeline's own
// spans.
const InstrumentationName = "github.com/loopers/commerce-pipeline"

// Vars are the standard variables Setup and the SDK read. Every binary
// accepts them, beside its own configuration (docs/configuration.md).
var Vars = []string{
	"OTEL_SDK_DISABLED",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG",
	"OTEL_SEMCONV_STABILITY_OPT_IN",
}

// enabled is set by Setup once a tracer provider with an exporter is
// installed.
var enabled atomic.Bool

// Enabled reports whether Setup installed an exporting tracer provider.
// Instrumentation that costs something even with the no-op provider
// (handler wrappers, database tracers) is installed only when it is true.
func Enabled() bool { return enabled.Load() }

// Tracer returns the pipeline's tracer from the global provider: the SDK's
// once Setup enabled tracing, the no-op one otherwise.
func Tracer() trace.Tracer {
	return otel.Tracer(InstrumentationName, trace.WithSchemaURL(SchemaURL))
}

// Shutdown flushes the spans still buffered and stops the exporter.
type Shutdown func(context.Context) error

// Setup configures tracing for the binary name from lookup (os.LookupEnv in
// production) and returns the function that flushes it on the way out. It
// is a no-op, returning a no-op Shutdown, when no endpoint is set or
// OTEL_SDK_DISABLED is true.
func Setup(ctx context.Context, name string, lookup func(string) (string, bool)) (Shutdown, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	setOptIn(get("OTEL_SEMCONV_STABILITY_OPT_IN"))
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return noShutdown, nil
	}
	endpoint, traces := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), true
	if endpoint == "" {
		endpoint, traces = get("OTEL_EXPORTER_OTLP_ENDPOINT"), false
	}
	if endpoint == "" {
		return noShutdown, nil
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	exp, err := exporter(ctx, protocol, endpoint, traces)
	if err != nil {
		return nil, err
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// (WithFromEnv) override the binary's name.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(SchemaURL),
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// No WithSampler: the SDK reads OTEL_TRACES_SAMPLER(_ARG), and without
	// them samples parent-based, always on for roots.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: flush spans: %w", err)
		}
		return nil
	}, nil
}

func noShutdown(context.Context) error { return nil }

// exporter returns the OTLP span exporter of protocol to endpoint. The
// generic endpoint is a base URL under which the HTTP exporter posts to
// /v1/traces; the per-signal one is used as it is.
func exporter(ctx context.Context, protocol, endpoint string, traces bool) (sdktrace.SpanExporter, error) {
	var (
		exp *otlptrace.Exporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		if !traces {
			endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
		}
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	case "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter to %s: %w", endpoint, err)
	}
	return exp, nil
}

// Install makes tp the global tracer provider, with W3C propagation, and
// turns on the instrumentation Enabled guards, as Setup does with an
// exporter. Tests install an SDK provider recording in memory
// (telemetrytest).
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	enabled.Store(true)
}
