//go:build !linux

package main

import "syscall"

// postgresProcAttr runs PostgreSQL as cred. Only Linux has a parent-death
// signal: elsewhere a bench that crashes leaves its PostgreSQL to be
// stopped by hand (its data directory is in the temporary directory).
func postgresProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
