//go:build linux

package kafkabroker

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchWithShell: a process started with watchWithShell is killed once
// the process that started it dies without ending it, as a broker is
// outside Linux when a test binary crashes. The test runs itself as that
// parent, which starts `sleep`, reports its pid and exits.
func TestWatchWithShell(t *testing.T) {
	t.Parallel()
	if os.Getenv("KAFKABROKER_WATCH_PARENT") == "1" {
		child := exec.Command("sleep", "120")
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := child.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		watchWithShell(child.Process)
		fmt.Println("pid", child.Process.Pid)
		os.Exit(0) // dies without ending the child
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestWatchWithShell$")
	parent.Env = append(os.Environ(), "KAFKABROKER_WATCH_PARENT=1")
	out, err := parent.Output()
	if err != nil {
		t.Fatalf("parent: %v: %s", err, out)
	}
	pid := 0
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "pid "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("parent reported no pid: %s", out)
	}
	// The watcher polls every second; 30 s only turns a hang into a failure.
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still runs 30 s after its parent died", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive says whether pid runs: it exists and is not a zombie waiting for
// its new parent to reap it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
