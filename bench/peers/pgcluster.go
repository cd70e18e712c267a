package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// pgCluster is a PostgreSQL server of the relay arm's own: initdb into a
// temporary directory, wal_level=logical for Debezium, on a free loopback
// port. The tests' PostgreSQL is never touched. Every side of the arm gets
// a fresh database on it, cloned from a migrated template.
type pgCluster struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan error
	n    int
}

// errNoPostgres says what to install when no server binaries are found.
var errNoPostgres = errors.New("bench/peers: the relay arm runs a PostgreSQL server of its own and needs its binaries " +
	"(initdb, postgres): apt-get install postgresql (scripts/testenv.sh installs it)")

// pgBinDir finds the directory of initdb and postgres: on PATH, or the
// newest under /usr/lib/postgresql (Debian keeps them off PATH).
func pgBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errNoPostgres
}

// pgSettings are the server's settings beyond PostgreSQL's defaults: what
// logical decoding needs, and loopback only.
var pgSettings = []string{
	"listen_addresses=127.0.0.1",
	"wal_level=logical",
	"max_wal_senders=10",
	"max_replication_slots=10",
}

func startPG(ctx context.Context) (*pgCluster, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-peers-pg-")
	if err != nil {
		return nil, err
	}
	// PostgreSQL refuses to run as root: as root, it runs as the postgres
	// user, which then owns the directory.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("bench/peers: running as root, PostgreSQL needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench/peers: initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir}
	for _, s := range pgSettings {
		args = append(args, "-c", s)
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	c := &pgCluster{dir: dir, port: port, done: make(chan error, 1)}
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = postgresProcAttr(cred)
	if err := c.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench/peers: start postgres: %w", err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	if err := c.waitReady(ctx); err != nil {
		c.close()
		return nil, err
	}
	if err := c.exec(ctx, "CREATE DATABASE peers_template"); err != nil {
		c.close()
		return nil, err
	}
	if err := migrations.Up(ctx, c.url("peers_template")); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// pid is the postmaster's process id: its children are the backends.
func (c *pgCluster) pid() int { return c.cmd.Process.Pid }

func (c *pgCluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case err := <-c.done:
			log, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
			return fmt.Errorf("bench/peers: postgres exited: %w\n%s", err, log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench/peers: postgres on port %d does not answer: %w", c.port, err)
		}
	}
}

func (c *pgCluster) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("bench/peers: %s: %w", sql, err)
	}
	return nil
}

// newDatabase creates a fresh migrated database and returns its name.
func (c *pgCluster) newDatabase(ctx context.Context) (string, error) {
	c.n++
	name := fmt.Sprintf("peers_%d", c.n)
	return name, c.exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE peers_template", name))
}

// dropDatabase drops the database's replication slots (a database with one
// cannot be dropped; a slot left behind would hold WAL forever) and then
// the database.
func (c *pgCluster) dropDatabase(ctx context.Context, name string) error {
	if err := c.exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name); err != nil {
		return err
	}
	return c.exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
}

// close stops the server (a fast shutdown) and removes its directory.
func (c *pgCluster) close() {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		err = <-c.done
	}
	if err != nil {
		slog.Warn("the arm's PostgreSQL did not shut down cleanly", logkey.Err, err)
	}
	_ = os.RemoveAll(c.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
