//go:build !linux

package lifeline

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// pollEvery is how often the fallback looks at its parent.
const pollEvery = 250 * time.Millisecond

// execTied runs the command as a child, relays the stop signals to it and
// stops it once the parent is gone: without PR_SET_PDEATHSIG, the only
// portable sign of a parent's death is being re-parented.
func execTied(parent int, argv, env []string) error {
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec // running the given command is this package's purpose
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("lifeline: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var kill <-chan time.Time
	for {
		select {
		case err := <-done:
			return err
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-tick.C:
			if kill == nil && os.Getppid() != parent {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(KillAfter)
			}
		case <-kill:
			_ = cmd.Process.Kill()
		}
	}
}
