package lifeline

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// execTied asks the kernel for SIGTERM when the parent dies, checks the
// parent did not die before that took effect, and becomes the command.
func execTied(parent int, argv, env []string) error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("lifeline: prctl(PR_SET_PDEATHSIG): %w", errno)
	}
	// A parent that ended between the check in Exec and the prctl sends no
	// signal: the process has been re-parented already.
	if got := os.Getppid(); got != parent {
		return fmt.Errorf("%w: the parent is %d, want %d", ErrParentGone, got, parent)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("lifeline: %w", err)
	}
	// The death signal setting survives execve (for a binary that is not
	// set-user-ID or set-group-ID).
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("lifeline: exec %s: %w", path, err)
	}
	return nil
}
