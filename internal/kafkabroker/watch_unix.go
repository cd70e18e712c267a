//go:build unix

package kafkabroker

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// watchWithShell starts a shell that polls, every second, this process and
// p, and kills p once this process is gone, so that a crashed parent leaks
// no broker (a second at most instead of none) where there is no
// parent-death signal. It ends with either; if it cannot start, p runs
// without it. It builds on every Unix so that Linux tests exercise it.
func watchWithShell(p *os.Process) {
	const script = `while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill -9 "$2" 2>/dev/null`
	cmd := exec.Command("/bin/sh", "-c", script, "kafkabroker-watch", strconv.Itoa(os.Getpid()), strconv.Itoa(p.Pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}
