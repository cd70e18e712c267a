// Package lifeline ties a command's life to a parent process's: when the
// parent ends, however it ends (SIGKILL included, which no trap sees), the
// command gets SIGTERM and shuts down as it would on a Ctrl-C. make dev
// runs every process through it (cmd/devrun), so that none outlives the
// script that started it.
//
// On Linux the kernel does the watching: Exec asks for SIGTERM on the
// parent's death (PR_SET_PDEATHSIG, which survives the exec) and replaces
// the calling process by the command, so nothing stands between the script
// and its service. Elsewhere Exec runs the command as a child, relays
// SIGINT, SIGTERM and SIGHUP to it, and polls its own parent: once that
// changes (the parent ended and the process was re-parented), the command
// gets SIGTERM, and SIGKILL if it is still running after KillAfter.
package lifeline

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrParentGone is Exec's error when the parent ended before the watch was
// in place: starting the command then would leave it behind at once.
var ErrParentGone = errors.New("lifeline: the parent process has already ended")

// KillAfter is how long the fallback waits after its SIGTERM before it
// kills the command.
const KillAfter = 20 * time.Second

// Exec runs argv (argv[0] looked up in PATH) with the environment env,
// bound to the process parent: when parent ends, argv gets SIGTERM. parent
// must be the calling process's parent. On Linux Exec returns only on an
// error; elsewhere it returns when the command ends, with its
// *exec.ExitError if it failed.
func Exec(parent int, argv, env []string) error {
	if len(argv) == 0 {
		return errors.New("lifeline: no command")
	}
	if got := os.Getppid(); got != parent {
		return fmt.Errorf("%w: the parent is %d, want %d", ErrParentGone, got, parent)
	}
	return execTied(parent, argv, env)
}
