package kafkabroker

import (
	"os"
	"syscall"
)

// sysProcAttr puts the JVM in a process group of its own and has the
// kernel kill it when the thread that started it ends (spawn holds that
// thread until the process exits), so a crashed parent leaks no broker.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// watchParent has nothing to do on Linux: the parent-death signal does it.
func watchParent(*os.Process) {}
