// Command devrun runs a command that must not outlive the process that
// started it: `devrun -parent PID command args...` (internal/lifeline).
// make dev (scripts/dev.sh) starts the broker and every service through
// it, with its own PID, so that whatever stops the script, SIGKILL
// included, stops them too.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"

	"github.com/loopers/commerce-pipeline/internal/lifeline"
)

func main() {
	fs := flag.NewFlagSet("devrun", flag.ExitOnError)
	parent := fs.Int("parent", 0, "the PID whose end stops the command (required: the caller's $$)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: devrun -parent PID command [args...]")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	if *parent <= 0 || fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	err := lifeline.Exec(*parent, fs.Args(), os.Environ())
	if err == nil {
		return
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	fmt.Fprintln(os.Stderr, "devrun:", err)
	os.Exit(1)
}
