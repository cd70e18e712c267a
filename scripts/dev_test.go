//go:build unix

package scripts_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// devReady bounds make dev's start: the first one compiles every binary,
// on a machine the other tests load too.
const devReady = 5 * time.Minute

// devGone bounds how long after the signal every process make dev started
// may still run, and its ports stay taken: the script gives each process
// 15 s (STOP_TIMEOUT) to stop before it kills it, and devrun's SIGTERM on
// the script's death starts the same graceful stop.
const devGone = 20 * time.Second

// TestDevStops starts make dev's script (scripts/dev.sh, with the embedded
// broker, one relay and one consumer instance, on ports of its own) and
// stops it each way a terminal, a supervisor or a user does: SIGTERM,
// SIGHUP or SIGINT (Ctrl-C) to the script or to its whole process group,
// or SIGKILL of the script alone, which no trap sees; and with its output
// piped to a reader the group signal ends too. Each time, no process
// it started is left and every port it listened on is free again.
//
// The cases run one after another, on one state directory: each run
// reuses the binaries the first one built.
//
//nolint:paralleltest // one make dev at a time: the cases share the ports and the state directory
func TestDevStops(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts make dev: needs PostgreSQL, Redis, curl and bash")
	}
	// Under nohup (or any parent that ignores SIGHUP) this process starts
	// with SIGHUP ignored, and an ignored signal stays ignored across exec:
	// the script could not trap it and a hangup would do nothing. A handler
	// here is reset to the default at exec, which is what a terminal's
	// session gives the script.
	if signal.Ignored(syscall.SIGHUP) {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		t.Cleanup(func() { signal.Stop(hup) })
	}
	state := t.TempDir()
	// A failed case must not leave its processes to the next test.
	t.Cleanup(func() {
		for _, p := range devProcesses(t, state) {
			if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	env := []string{
		"DATABASE_URL=" + testenv.DatabaseURL(t), "REDIS_URL=" + testenv.RedisURL(t),
		"KAFKA=embedded", "DEV_RELAYS=1", "DEV_CONSUMERS=1", "DEV_STATE=" + state,
	}
	ports := map[string]string{}
	for _, name := range []string{"DEV_API_ADDR", "DEV_API_ADMIN_ADDR", "DEV_RELAY_ADMIN_ADDR", "DEV_CONSUMERS_ADMIN_ADDR", "DEV_KAFKA_PORT"} {
		addr, err := stack.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		ports[name] = addr
		if name == "DEV_KAFKA_PORT" {
			_, port, _ := net.SplitHostPort(addr)
			env = append(env, name+"="+port)
			continue
		}
		env = append(env, name+"="+addr)
	}
	tests := []struct {
		name  string
		sig   syscall.Signal
		group bool // to the script's process group, as a terminal or a supervisor sends it
		// piped runs `dev.sh 2>&1 | cat` as `make dev | tee log` does: the
		// signal to the group ends the reader of the script's output too,
		// so that every line the script writes while it stops fails.
		piped bool
	}{
		{"SIGTERM to the group", syscall.SIGTERM, true, false},
		{"SIGTERM to the group, output piped", syscall.SIGTERM, true, true},
		{"SIGTERM to the script", syscall.SIGTERM, false, false},
		{"SIGHUP to the group", syscall.SIGHUP, true, false},
		{"SIGHUP to the group, output piped", syscall.SIGHUP, true, true},
		{"SIGHUP to the script", syscall.SIGHUP, false, false},
		{"Ctrl-C: SIGINT to the group", syscall.SIGINT, true, false},
		{"SIGINT to the script", syscall.SIGINT, false, false},
		{"SIGKILL to the script", syscall.SIGKILL, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			script := startDev(t, state, env, tc.piped)
			target := script.Process.Pid
			if tc.group {
				target = -target // the script leads its group
			}
			if err := syscall.Kill(target, tc.sig); err != nil {
				t.Fatalf("kill(%d, %v): %v", target, tc.sig, err)
			}
			signalled := time.Now()
			done := make(chan error, 1)
			go func() { done <- script.Wait() }()
			select {
			case err := <-done:
				t.Logf("the script ended: %v", err) // 128 + the signal, or killed
			case <-time.After(devGone):
				_ = script.Process.Kill()
				t.Fatalf("the script still runs %s after %v\nscript's log:\n%s\nservices' logs:\n%s", devGone, tc.sig,
					readFile(state, "dev.err"), logTails(state))
			}
			deadline := signalled.Add(devGone)
			for {
				left, taken := devProcesses(t, state), takenPorts(ports)
				if len(left) == 0 && len(taken) == 0 {
					t.Logf("everything stopped %s after the signal", time.Since(signalled).Round(10*time.Millisecond))
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s after %v: processes left %q, ports taken %q\nscript's log:\n%s",
						devGone, tc.sig, left, taken, readFile(state, "dev.err"))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// startDev starts scripts/dev.sh in a process group of its own and returns
// once it says the pipeline is running. piped runs it as a shell's
// pipeline into cat (the shell leads the group and is what it returns).
func startDev(t *testing.T, state string, env []string, piped bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "dev.sh")
	if piped {
		cmd = exec.Command("bash", "-c", "bash dev.sh 2>&1 | cat")
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := os.Create(filepath.Join(state, "dev.err"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() { // read to the end, so that the script never blocks on its output
			if !found && strings.Contains(sc.Text(), "The pipeline is running.") {
				found = true
				ready <- true
			}
		}
		if !found {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("make dev ended before the pipeline ran:\n%s", readFile(state, "dev.err"))
		}
	case <-time.After(devReady):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("make dev is not running after %s:\n%s", devReady, readFile(state, "dev.err"))
	}
	return cmd
}

// devProcesses lists the processes that run a binary of make dev's state
// directory, as "pid args".
func devProcesses(t *testing.T, state string) []string {
	t.Helper()
	out, err := exec.Command("ps", "-eo", "pid=,args=").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	var left []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, filepath.Join(state, "bin")+string(filepath.Separator)) {
			left = append(left, strings.TrimSpace(line))
		}
	}
	return left
}

// takenPorts lists the addresses of ports that cannot be listened on.
func takenPorts(ports map[string]string) []string {
	var taken []string
	for name, addr := range ports {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			taken = append(taken, fmt.Sprintf("%s %s", name, addr))
			continue
		}
		_ = l.Close()
	}
	return taken
}

// logTails returns the last lines of every log in the dev state's logs
// directory: what each process said while it was being stopped.
func logTails(state string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(state, "logs", "*.log"))
	for _, l := range logs {
		lines := strings.Split(strings.TrimSpace(readFile(filepath.Dir(l), filepath.Base(l))), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(l), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

func readFile(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}
