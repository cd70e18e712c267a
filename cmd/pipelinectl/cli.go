package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // the operation failed; stderr says why
	exitUsage   = 2 // bad command, flag or configuration; nothing was done
	exitPartial = 3 // some records were re-driven and others failed (see the output)
)

// usageError marks an error in how pipelinectl was called.
type usageError struct {
	msg     string
	printed bool // the message is on stderr already
}

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{msg: fmt.Sprintf(format, args...)} }

// errPartial is returned by a command whose output reports partial failure.
var errPartial = errors.New("partly failed")

// env is what a command gets from the process.
type env struct {
	lookup func(string) (string, bool)
	stdout io.Writer
	stderr io.Writer
}

// setting reads one required setting through internal/config, as the
// services do; a missing or malformed one is a usage error naming it.
func (e env) setting(read func(*config.Loader) string) (string, error) {
	l := config.New(e.lookup)
	v := read(l)
	if err := l.Err(); err != nil {
		return "", usageError{msg: err.Error()}
	}
	return v, nil
}

func (e env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// command is one node of the command tree: a group with subcommands, or a
// leaf with flags and a run function. A new command is a file that returns
// a *command and one line in commands().
type command struct {
	name    string
	summary string
	sub     []*command
	// flags defines the leaf's flags and returns the function that runs it
	// once they are parsed. Every leaf also gets -o.
	flags func(fs *flag.FlagSet) func(ctx context.Context, e env, out output, args []string) error
}

// commands is the tree under `pipelinectl`.
func commands() []*command {
	return []*command{dltCommand(), parkedCommand(), outboxCommand(), clusterCommand()}
}

func run(ctx context.Context, args []string, e env) int {
	root := &command{name: "pipelinectl", sub: commands()}
	err := root.exec(ctx, e, args, "pipelinectl")
	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &uerr):
		if uerr.printed {
			return exitUsage
		}
		msg := uerr.msg
		if !strings.HasPrefix(msg, "pipelinectl") {
			msg = "pipelinectl: " + msg
		}
		fmt.Fprintln(e.stderr, msg)
		return exitUsage
	case errors.Is(err, errPartial):
		fmt.Fprintf(e.stderr, "pipelinectl: %s\n", err)
		return exitPartial
	default:
		fmt.Fprintf(e.stderr, "pipelinectl: %s\n", err)
		return exitFailed
	}
}

func (c *command) exec(ctx context.Context, e env, args []string, path string) error {
	if c.flags == nil {
		if len(args) == 0 {
			c.usage(e.stderr, path)
			return usagef("%s: a subcommand is required", path)
		}
		if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			c.usage(e.stdout, path)
			return flag.ErrHelp
		}
		for _, s := range c.sub {
			if s.name == args[0] {
				return s.exec(ctx, e, args[1:], path+" "+s.name)
			}
		}
		return usagef("%s: unknown command %q; one of: %s", path, args[0], strings.Join(c.names(), ", "))
	}
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	// The flag package would print the error and the defaults itself; run
	// prints the error once and the defaults follow it.
	fs.SetOutput(io.Discard)
	format := fs.String("o", "table", "output format: table or json")
	runLeaf := c.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(e.stdout, "usage: %s [flags]\n\n", path)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return err
		}
		fmt.Fprintf(e.stderr, "%s: %v\n\nflags:\n", path, err)
		fs.SetOutput(e.stderr)
		fs.PrintDefaults()
		return usageError{msg: err.Error(), printed: true}
	}
	if *format != "table" && *format != "json" {
		return usagef("%s: -o must be table or json, got %q", path, *format)
	}
	return runLeaf(ctx, e, output{w: e.stdout, json: *format == "json"}, fs.Args())
}

func (c *command) names() []string {
	var out []string
	for _, s := range c.sub {
		out = append(out, s.name)
	}
	return out
}

func (c *command) usage(w io.Writer, path string) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", path)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range c.sub {
		fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.summary)
	}
	tw.Flush()
}

// noArgs rejects positional arguments to a leaf that takes none.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// output writes a command's result as a table or as JSON.
type output struct {
	w    io.Writer
	json bool
}

// print writes v as indented JSON, or calls table with a tabwriter.
func (o output) print(v any, header []string, table func(row func(cells ...any))) error {
	if o.json {
		enc := json.NewEncoder(o.w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	table(func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = escape(fmt.Sprint(c))
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	})
	return tw.Flush()
}

// escape writes the control and format characters of s (a record's key or
// error, written by anyone) as Go escapes, and invalid UTF-8 as \x bytes: a
// tab, newline or terminal escape sequence in a cell must not break the
// table or drive the operator's terminal.
func escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
