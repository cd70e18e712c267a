package kafkabroker

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr puts the JVM in a process group of its own and has the
// kernel kill it when the thread that started it ends (spawn holds that
// thread until the process exits), so a crashed parent leaks no broker.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// watchParent has nothing to do on Linux: the parent-death signal does it.
func watchParent(*os.Process) {}

// waitStopped waits until every thread of process pid is stopped, or
// timeout passes: SIGSTOP is delivered to each thread as it next runs, so
// a thread busy on a core at the signal (writing an answer, say) may still
// finish what it does. A caller that freezes a broker to see requests go
// unanswered must not start before the freeze is whole.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThreads(pid)
		if err != nil || running == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads of process %d still running %s after SIGSTOP", running, pid, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runningThreads counts the threads of pid not in the stopped state.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("threads of process %d: %w", pid, err)
	}
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command name's closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			continue
		}
		if s := stat[i+2]; s != 'T' && s != 't' && s != 'Z' && s != 'X' {
			n++
		}
	}
	return n, nil
}
