//go:build unix

package lifeline_test

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

	"github.com/loopers/commerce-pipeline/internal/lifeline"
)

// helperEnv makes the test binary, run by TestExecStopsWithParent, tie
// `sleep` to its parent instead of running the tests.
const helperEnv = "LIFELINE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		err := lifeline.Exec(os.Getppid(), []string{"sleep", "60"}, os.Environ())
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestExecRefuses: Exec starts nothing without a command, or when the
// caller's parent is not the one named (it ended, and the process was
// re-parented: the command would be left behind at once).
func TestExecRefuses(t *testing.T) {
	t.Parallel()
	if err := lifeline.Exec(os.Getppid(), nil, nil); err == nil {
		t.Error("Exec with no command: no error")
	}
	if err := lifeline.Exec(os.Getppid()+1, []string{"true"}, nil); !errors.Is(err, lifeline.ErrParentGone) {
		t.Errorf("Exec under another parent: %v, want ErrParentGone", err)
	}
}

// TestExecStopsWithParent: a shell runs the command through Exec in the
// background and is then killed with SIGKILL, which it cannot trap; the
// command ends within seconds.
func TestExecStopsWithParent(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", `"$0" & echo $!; wait`, self)
	sh.Env = append(os.Environ(), helperEnv+"=1")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// Kill the shell only once the helper has become sleep.
	for deadline := time.Now().Add(30 * time.Second); !strings.HasPrefix(args(pid), "sleep"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is %q, not sleep, after 30 s", pid, args(pid))
		}
	}
	if err := sh.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sh.Wait()
	killed := time.Now()
	for args(pid) != "" {
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("sleep (%d) still runs 5 s after its parent was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("sleep ended %s after its parent", time.Since(killed).Round(time.Millisecond))
}

// args is the command line of a running process, "" when there is none
// (an exited process not yet reaped counts as none).
func args(pid int) string {
	out, err := exec.Command("ps", "-o", "stat=,args=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return ""
	}
	stat, rest, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if strings.HasPrefix(stat, "Z") {
		return ""
	}
	return strings.TrimSpace(rest)
}
