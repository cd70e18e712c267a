package main

import "syscall"

// postgresProcAttr runs PostgreSQL as cred, and has the kernel send it
// SIGQUIT (its immediate shutdown) if this program dies first.
func postgresProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
}
