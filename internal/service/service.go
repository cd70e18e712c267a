// Package service is how every binary of the pipeline starts: a context that
// ends on SIGINT or SIGTERM, a JSON slog logger on stderr carrying the
// service's name, the configuration read from the environment, run(ctx)
// error, and the exit code. Tracing is set up around run from the standard
// OTEL_* variables (internal/telemetry).
//
// A binary started with the single argument -config-vars prints the
// variables its configuration reads, as JSON, and exits: the deployment tests
// check docs/configuration.md and the manifests against that list.
package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

// ConfigVarsFlag is the argument that makes a binary print its variables.
const ConfigVarsFlag = "-config-vars"

// Main runs a service and exits: load reads its configuration through the
// Loader (its variables and checks), run does its work until ctx ends. A
// configuration error or an error from run is logged as "<name> failed" and
// exits with status 1.
func Main[C any](name string, load func(*config.Loader) C, run func(ctx context.Context, cfg C, logger *slog.Logger) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, name, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, load, run)
	stop()
	os.Exit(code)
}

// Run is Main without the process: it returns the exit code. args are the
// command-line arguments after the program name; only ConfigVarsFlag means
// anything here.
func Run[C any](ctx context.Context, name string, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer,
	load func(*config.Loader) C, run func(ctx context.Context, cfg C, logger *slog.Logger) error) int {
	logger := NewLogger(stderr, name)
	if len(args) == 1 && args[0] == ConfigVarsFlag {
		l := config.New(func(string) (string, bool) { return "", false })
		load(l)
		if err := json.NewEncoder(stdout).Encode(l.Vars()); err != nil {
			logger.Error(name+" failed", logkey.Err, err)
			return 1
		}
		return 0
	}
	l := config.New(lookup)
	cfg := load(l)
	// Deprecated names keep working for one release; each start says which
	// to change, even when the configuration is wrong for another reason.
	for _, d := range l.Deprecations() {
		logger.Warn(d.Message(), "variable", d.Old, "replacement", d.New)
	}
	err := l.Err()
	if err != nil {
		err = fmt.Errorf("%s configuration: %w", name, err)
	} else {
		err = traced(ctx, name, lookup, logger, func() error { return run(ctx, cfg, logger) })
	}
	if err != nil {
		logger.Error(name+" failed", logkey.Err, err)
		return 1
	}
	return 0
}

// flushTimeout bounds the flush of the spans still buffered at exit.
const flushTimeout = 5 * time.Second

// traced sets up tracing from the standard OTEL_* variables
// (internal/telemetry) around run, and flushes the spans run left buffered.
// A failed flush is logged: the work itself is done.
func traced(ctx context.Context, name string, lookup func(string) (string, bool), logger *slog.Logger, run func() error) error {
	shutdown, err := telemetry.Setup(ctx, name, lookup)
	if err != nil {
		return err
	}
	err = run()
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if ferr := shutdown(flushCtx); ferr != nil {
		logger.Warn("spans lost at exit", logkey.Err, ferr)
	}
	return err
}

// NewLogger returns the JSON logger of service name writing to w; every
// record carries "service": name.
func NewLogger(w io.Writer, name string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil)).With("service", name)
}

// NoConfig is the load function of a program configured by flags alone.
func NoConfig(*config.Loader) struct{} { return struct{}{} }
