//go:build unix && !linux

package kafkabroker

import (
	"os"
	"syscall"
	"time"
)

// sysProcAttr puts the JVM in a process group of its own. Outside Linux
// there is no parent-death signal: watchParent stands in for it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchParent kills the JVM p within a second of this process's death.
func watchParent(p *os.Process) { watchWithShell(p) }

// waitStopped has no per-thread states to read outside Linux: the signal
// is taken as the freeze.
func waitStopped(int, time.Duration) error { return nil }
