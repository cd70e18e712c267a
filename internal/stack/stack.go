// Package stack builds the service binaries and runs them as processes, for
// the end-to-end tests and benchmarks: the real programs, started and killed
// the way an operator or a crash would.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Services lists the packages of the three service binaries, relative to the
// module root.
var Services = []string{"./services/commerce-api", "./services/outbox-relay", "./services/product-consumers"}

// Binaries is a directory of built programs.
type Binaries struct{ Dir string }

// Build compiles pkgs (paths relative to moduleRoot) into a new temporary
// directory.
func Build(ctx context.Context, moduleRoot string, pkgs ...string) (*Binaries, error) {
	dir, err := os.MkdirTemp("", "commerce-bin-")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return &Binaries{Dir: dir}, nil
}

// Remove deletes the binaries.
func (b *Binaries) Remove() error { return os.RemoveAll(b.Dir) }

// ModuleRoot finds the directory holding go.mod, from the working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Proc is a program running as a process.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Start runs the binary named bin with the current environment plus env,
// writing its output to logPath.
func (b *Binaries) Start(bin string, env map[string]string, logPath string) (*Proc, error) {
	return b.StartArgs(bin, nil, env, logPath)
}

// StartArgs is Start with command-line arguments.
func (b *Binaries) StartArgs(bin string, args []string, env map[string]string, logPath string) (*Proc, error) {
	cmd := exec.Command(filepath.Join(b.Dir, bin), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Proc{Name: bin, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill stops the process at once, as a crash would: nothing is flushed,
// committed or released.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process (SIGSTOP and SIGCONT freeze and thaw it).
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop asks the process to shut down (SIGTERM) and kills it if it has not
// exited within grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Log returns the last n bytes of the process's output.
func (p *Proc) Log(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// FreeAddr returns a loopback address with a port nobody listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitHTTP polls url until it answers 200 or ctx ends.
func WaitHTTP(ctx context.Context, url string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never answered 200: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
