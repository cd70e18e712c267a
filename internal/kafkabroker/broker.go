// Package kafkabroker runs Apache Kafka's own broker as plain JVM processes
// on loopback: one node, or a cluster of combined broker/controller nodes in
// KRaft mode. It is the broker of the tests, the benchmarks, `make kafka` and
// `make dev KAFKA=real`; nothing here needs Docker.
//
// The broker's jars come from Maven Central through the pinned pom.xml beside
// this file (Classpath), cached outside the work tree. Start formats each
// node's storage, starts the nodes and returns once the cluster answers a
// metadata request listing every node: readiness is the broker's own answer,
// never a sleep. Close ends exactly the processes Start started; a process
// this one leaves behind when it dies is killed by the kernel (the
// parent-death signal, on Linux) or within a second by a watching shell
// (elsewhere), so a crashed test binary leaks no broker.
//
//	c, err := kafkabroker.Start(ctx, kafkabroker.Options{Nodes: 3})
//	if err != nil { ... }
//	defer c.Close()
//	brokers := c.Brokers() // ["127.0.0.1:40123", ...]
//	c.Node(0).Kill()       // and Start(ctx), Stop, Pause, Resume: real faults
package kafkabroker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// Listener is a client listener beside the plain one every node has.
type Listener struct {
	// Name is the listener's name in the broker's configuration (upper
	// case, such as SASL_SSL or MTLS) and the key of Cluster.Addrs.
	Name string
	// Protocol is its security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or
	// SASL_SSL. Its settings go in Options.Props, with the
	// listener.name.<name lower case>. prefix where they are per listener.
	Protocol string
}

// Options configures a cluster. The zero value is one node on free ports in
// a temporary directory.
type Options struct {
	// Nodes is the number of combined broker/controller nodes (1 when 0).
	// Replicated internal topics and the default replication factor are
	// min(Nodes, 3); min.insync.replicas is 2 from three nodes on.
	Nodes int
	// Dir keeps each node's log and settings. Empty: a new temporary
	// directory, removed by Close. A Dir that holds a cluster already (from
	// an earlier run with the same Nodes) is started again as it is.
	Dir string
	// Ports are the plain listeners' ports, one per node; free ports when
	// empty. Controller ports are free ports, or each plain port + 1 when
	// Ports is set.
	Ports []int
	// Listeners are more client listeners on every node, on free ports.
	Listeners []Listener
	// Props are broker settings applied after the defaults, on every node.
	Props map[string]string
	// Heap is the JVM's maximum heap (512m when empty).
	Heap string
	// JVMOptions are more options for the java command.
	JVMOptions []string
	// StartTimeout bounds how long Start waits for the cluster (2 minutes
	// when zero).
	StartTimeout time.Duration
	// SCRAMUsers are SCRAM credentials written into the cluster's metadata
	// when its storage is formatted (kafka-storage format --add-scram), so
	// they exist before the first client connects. A Dir that holds a
	// cluster already keeps the credentials it was formatted with.
	SCRAMUsers []SCRAMUser
}

// SCRAMUser is one SCRAM credential: a user and its password under one
// mechanism (a user who may log in with both needs an entry for each).
type SCRAMUser struct {
	// Mechanism is SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	Name      string
	// Password may hold any character but a double quote or a backslash
	// (the format tool's quoting has no escape for them).
	Password string
}

// formatArg is the user's --add-scram argument of kafka-storage format.
func (u SCRAMUser) formatArg() (string, error) {
	if u.Mechanism != "SCRAM-SHA-256" && u.Mechanism != "SCRAM-SHA-512" {
		return "", fmt.Errorf("kafkabroker: SCRAM user %q: mechanism %q, want SCRAM-SHA-256 or SCRAM-SHA-512", u.Name, u.Mechanism)
	}
	for _, v := range []string{u.Name, u.Password} {
		if v == "" || strings.ContainsAny(v, "\\\"") {
			return "", fmt.Errorf("kafkabroker: SCRAM user %q: a name and a password without \\ or \" are required", u.Name)
		}
	}
	return fmt.Sprintf("%s=[name=%q,password=%q]", u.Mechanism, u.Name, u.Password), nil
}

// Cluster is a running set of nodes.
type Cluster struct {
	opts      Options
	dir       string
	temporary bool
	classpath string
	clusterID string
	nodes     []*Node
}

// PlainListener names the plaintext client listener every node has.
const PlainListener = "PLAINTEXT"

const controllerListener = "CONTROLLER"

// Start formats (unless Dir holds a cluster already) and starts a cluster,
// and returns when every node is registered and answers.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if len(opts.Ports) != 0 && len(opts.Ports) != opts.Nodes {
		return nil, fmt.Errorf("kafkabroker: %d ports for %d nodes", len(opts.Ports), opts.Nodes)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	classpath, err := Classpath(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, classpath: classpath, dir: opts.Dir}
	if c.dir != "" {
		// Absolute: each node's JVM runs in its own directory, where a
		// relative path in its arguments and settings would not resolve.
		if c.dir, err = filepath.Abs(c.dir); err != nil {
			return nil, fmt.Errorf("kafkabroker: %w", err)
		}
	}
	if c.dir == "" {
		if c.dir, err = tempDir(); err != nil {
			return nil, err
		}
		c.temporary = true
	}
	if err := c.layout(); err != nil {
		c.cleanup()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.format(ctx); err != nil {
		c.cleanup()
		return nil, err
	}
	for _, n := range c.nodes {
		if err := n.spawn(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	if err := c.waitNodes(ctx, c.nodes...); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// layout assigns node ids and ports and writes each node's settings, or
// reads them back from a Dir that holds a cluster.
func (c *Cluster) layout() error {
	state := filepath.Join(c.dir, "cluster.properties")
	saved, err := readProps(state)
	switch {
	case err == nil:
		c.clusterID = saved["cluster.id"]
		if saved["nodes"] != strconv.Itoa(c.opts.Nodes) {
			return fmt.Errorf("kafkabroker: %s holds a cluster of %s nodes, not %d: remove it to start afresh", c.dir, saved["nodes"], c.opts.Nodes)
		}
	case errors.Is(err, os.ErrNotExist):
		saved = map[string]string{"nodes": strconv.Itoa(c.opts.Nodes)}
		c.clusterID = newClusterID()
		saved["cluster.id"] = c.clusterID
	default:
		return err
	}
	names := append([]string{PlainListener, controllerListener}, listenerNames(c.opts.Listeners)...)
	for i := range c.opts.Nodes {
		n := &Node{c: c, id: i + 1, dir: filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1)), ports: map[string]int{}}
		for _, name := range names {
			key := fmt.Sprintf("node.%d.port.%s", n.id, name)
			if p, err := strconv.Atoi(saved[key]); err == nil {
				n.ports[name] = p
				continue
			}
			var p int
			switch {
			case len(c.opts.Ports) > 0 && name == PlainListener:
				p = c.opts.Ports[i]
			case len(c.opts.Ports) > 0 && name == controllerListener:
				p = c.opts.Ports[i] + 1
			default:
				if p, err = freePort(); err != nil {
					return err
				}
			}
			n.ports[name] = p
			saved[key] = strconv.Itoa(p)
		}
		c.nodes = append(c.nodes, n)
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("kafkabroker: %w", err)
	}
	if err := writeProps(state, saved); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := n.writeConfig(); err != nil {
			return err
		}
	}
	return nil
}

func listenerNames(ls []Listener) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}

// format formats every node's storage that is not formatted yet, the nodes
// in parallel (each is a JVM start).
func (c *Cluster) format(ctx context.Context) error {
	var scramArgs []string
	for _, u := range c.opts.SCRAMUsers {
		arg, err := u.formatArg()
		if err != nil {
			return err
		}
		scramArgs = append(scramArgs, "--add-scram", arg)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		if _, err := os.Stat(filepath.Join(n.dir, "data", "meta.properties")); err == nil {
			continue
		}
		args := append([]string{"-cp", c.classpath, "kafka.tools.StorageTool", "format", "-t", c.clusterID, "-c", n.configPath(), "--ignore-formatted"}, scramArgs...)
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, "java", args...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("kafkabroker: format node %d: %w\n%s", n.id, err, out)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Brokers returns the nodes' plain listener addresses.
func (c *Cluster) Brokers() []string { return c.Addrs(PlainListener) }

// Addrs returns the nodes' addresses of listener (PlainListener or one of
// Options.Listeners).
func (c *Cluster) Addrs(listener string) []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr(listener)
	}
	return out
}

// Nodes returns the cluster's nodes, in node id order.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns the node with id (1 to Nodes).
func (c *Cluster) Node(id int) *Node { return c.nodes[id-1] }

// Dir is where the nodes keep their logs and settings; each node's output
// is in node-N/broker.log.
func (c *Cluster) Dir() string { return c.dir }

// Close kills every running node, waits for it to exit and, when Dir was
// temporary, removes it. It ends only the processes this cluster started.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		if err := n.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	c.cleanup()
	return errors.Join(errs...)
}

// Shutdown stops every node gracefully (a controlled shutdown that moves
// leadership away first) and waits, killing a node that takes longer than
// 30 s.
func (c *Cluster) Shutdown() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	c.cleanup()
	return errors.Join(errs...)
}

func (c *Cluster) cleanup() {
	if c.temporary {
		_ = os.RemoveAll(c.dir)
	}
}

// waitNodes waits until each of nodes answers a metadata request listing
// itself: the node has caught up with the cluster's metadata and is
// unfenced, so clients can use it.
func (c *Cluster) waitNodes(ctx context.Context, nodes ...*Node) error {
	for _, n := range nodes {
		for {
			err := n.answers()
			if err == nil {
				break
			}
			select {
			case <-n.exitedChan():
				return fmt.Errorf("kafkabroker: node %d exited while starting: %s", n.id, n.logTail())
			case <-ctx.Done():
				return fmt.Errorf("kafkabroker: node %d not ready: %w (last: %w)\n%s", n.id, ctx.Err(), err, n.logTail())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// WaitReady waits until every running node answers (after Start of a
// node, or Resume).
func (c *Cluster) WaitReady(ctx context.Context) error {
	var running []*Node
	for _, n := range c.nodes {
		if n.Running() {
			running = append(running, n)
		}
	}
	return c.waitNodes(ctx, running...)
}

// Node is one combined broker/controller process.
type Node struct {
	c     *Cluster
	id    int
	dir   string
	ports map[string]int

	mu     sync.Mutex
	proc   *os.Process
	exited chan struct{}
}

// ID is the node's id (1 to Nodes), its node.id and broker id.
func (n *Node) ID() int { return n.id }

// Addr returns the node's address on listener.
func (n *Node) Addr(listener string) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.ports[listener]))
}

// Pid is the node's process id, 0 when it is not running.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid
}

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *Node) exitedChan() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return n.exited
}

// Start starts a node that is not running on its existing storage, and
// waits until it answers.
func (n *Node) Start(ctx context.Context) error {
	if n.Running() {
		return fmt.Errorf("kafkabroker: node %d is running", n.id)
	}
	if err := n.spawn(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.c.opts.StartTimeout)
	defer cancel()
	return n.c.waitNodes(ctx, n)
}

// Kill sends SIGKILL (the process dies at once, as in a crash or a lost
// machine) and waits for it to exit. Killing a node that is not running
// does nothing.
func (n *Node) Kill() error { return n.signalAndWait(syscall.SIGKILL, 0) }

// Stop asks the node to shut down (SIGTERM: a controlled shutdown) and
// waits, killing it after 30 s.
func (n *Node) Stop() error { return n.signalAndWait(syscall.SIGTERM, 30*time.Second) }

// Pause stops the process where it is (SIGSTOP): it holds its sockets but
// answers nothing, as a machine that hangs or a long GC pause.
func (n *Node) Pause() error {
	if err := n.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if err := waitStopped(p.Pid, 5*time.Second); err != nil {
		return fmt.Errorf("kafkabroker: node %d: %w", n.id, err)
	}
	return nil
}

// Resume continues a paused process (SIGCONT).
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil || !n.Running() {
		return fmt.Errorf("kafkabroker: node %d is not running", n.id)
	}
	if err := p.Signal(sig); err != nil {
		return fmt.Errorf("kafkabroker: node %d: %w", n.id, err)
	}
	return nil
}

func (n *Node) signalAndWait(sig syscall.Signal, grace time.Duration) error {
	if !n.Running() {
		return nil
	}
	n.mu.Lock()
	p, exited := n.proc, n.exited
	n.mu.Unlock()
	// A paused process handles SIGTERM only once it runs again.
	_ = p.Signal(syscall.SIGCONT)
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kafkabroker: node %d: %w", n.id, err)
	}
	if grace > 0 {
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
			_ = p.Kill()
		}
	}
	<-exited
	return nil
}

// spawn starts the node's JVM. The process is started from a goroutine that
// holds its OS thread until the process exits: the parent-death signal (on
// Linux) belongs to the thread that forked, and Go may otherwise end that thread
// while the broker runs, killing it.
func (n *Node) spawn() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "broker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkabroker: %w", err)
	}
	heap := n.c.opts.Heap
	if heap == "" {
		heap = "512m"
	}
	args := []string{"-Xms128m", "-Xmx" + heap, "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(n.dir, "log4j2.yaml")}
	if !slices.ContainsFunc(n.c.opts.JVMOptions, func(o string) bool { return strings.HasPrefix(o, "-XX:+Use") && strings.HasSuffix(o, "GC") }) {
		// The collector Kafka's own start script chooses, unless the
		// options choose another.
		args = append(args, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent")
	}
	args = append(args, n.c.opts.JVMOptions...)
	args = append(args, "-cp", n.c.classpath, "kafka.Kafka", n.configPath())
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the process
		cmd := exec.Command("java", args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Dir = n.dir
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			_ = logf.Close()
			started <- fmt.Errorf("kafkabroker: start node %d: %w", n.id, err)
			return
		}
		watchParent(cmd.Process)
		n.mu.Lock()
		n.proc, n.exited = cmd.Process, exited
		n.mu.Unlock()
		started <- nil
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	return <-started
}

// answers asks the node alone for metadata and checks that it lists itself.
func (n *Node) answers() error {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ClientID = "kafkabroker-readiness"
	cfg.Net.DialTimeout = time.Second
	cfg.Net.ReadTimeout = 2 * time.Second
	cfg.Metadata.Retry.Max = 0
	cfg.Metadata.Full = false
	b := sarama.NewBroker(n.Addr(PlainListener))
	if err := b.Open(cfg); err != nil {
		return err
	}
	defer b.Close()
	resp, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7})
	if err != nil {
		return err
	}
	for _, br := range resp.Brokers {
		if br.ID() == int32(n.id) {
			return nil
		}
	}
	return fmt.Errorf("node %d lists brokers %v, not itself yet", n.id, brokerIDs(resp.Brokers))
}

func brokerIDs(bs []*sarama.Broker) []int32 {
	out := make([]int32, len(bs))
	for i, b := range bs {
		out[i] = b.ID()
	}
	return out
}

// logTail returns the end of the node's output, for errors.
func (n *Node) logTail() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "broker.log"))
	if err != nil {
		return ""
	}
	const keep = 4000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}

func (n *Node) configPath() string { return filepath.Join(n.dir, "server.properties") }

func (n *Node) writeConfig() error {
	c := n.c
	rf := min(c.opts.Nodes, 3)
	minISR := 1
	if c.opts.Nodes >= 3 {
		minISR = 2
	}
	var voters []string
	for i := range c.opts.Nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, c.nodePort(i, controllerListener)))
	}
	listeners := []string{
		fmt.Sprintf("%s://127.0.0.1:%d", PlainListener, n.ports[PlainListener]),
		fmt.Sprintf("%s://127.0.0.1:%d", controllerListener, n.ports[controllerListener]),
	}
	advertised := []string{listeners[0]}
	protocols := []string{PlainListener + ":PLAINTEXT", controllerListener + ":PLAINTEXT"}
	for _, l := range c.opts.Listeners {
		addr := fmt.Sprintf("%s://127.0.0.1:%d", l.Name, n.ports[l.Name])
		listeners = append(listeners, addr)
		advertised = append(advertised, addr)
		protocols = append(protocols, l.Name+":"+l.Protocol)
	}
	p := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(n.id),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"listeners":                                        strings.Join(listeners, ","),
		"advertised.listeners":                             strings.Join(advertised, ","),
		"listener.security.protocol.map":                   strings.Join(protocols, ","),
		"controller.listener.names":                        controllerListener,
		"inter.broker.listener.name":                       PlainListener,
		"log.dirs":                                         filepath.Join(n.dir, "data"),
		"num.partitions":                                   "3",
		"default.replication.factor":                       strconv.Itoa(rf),
		"min.insync.replicas":                              strconv.Itoa(minISR),
		"offsets.topic.replication.factor":                 strconv.Itoa(rf),
		"transaction.state.log.replication.factor":         strconv.Itoa(rf),
		"transaction.state.log.min.isr":                    strconv.Itoa(minISR),
		"share.coordinator.state.topic.replication.factor": strconv.Itoa(rf),
		"share.coordinator.state.topic.min.isr":            strconv.Itoa(minISR),
		"auto.create.topics.enable":                        "false",
	}
	maps.Copy(p, c.opts.Props)
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("kafkabroker: %w", err)
	}
	if err := writeProps(n.configPath(), p); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "log4j2.yaml"), []byte(log4jConfig), 0o644)
}

func (c *Cluster) nodePort(i int, listener string) int {
	if i < len(c.nodes) {
		return c.nodes[i].ports[listener]
	}
	return 0
}

// log4jConfig sends warnings and errors to the process's output (the
// node's broker.log), and the line that says the broker started.
const log4jConfig = `Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
`

func writeProps(path string, p map[string]string) error {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("kafkabroker: %w", err)
	}
	return nil
}

func readProps(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

func newClusterID() string {
	for {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		// An id that starts with "-" reads as an option to kafka-storage
		// format (1 start in 64); Kafka's own Uuid.randomUuid skips them too.
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id
		}
	}
}

// freePort returns a port free on 127.0.0.1 now, below the kernel's
// ephemeral range: a port the kernel hands out for bind(":0") is also one
// it may give an outgoing connection as its source port before the JVM
// binds it, and the broker then fails with "address already in use" (seen
// once under the test suite's many connections). Below the range only
// listeners take ports.
func freePort() (int, error) {
	lo, hi := 10000, ephemeralLow()-1
	for range 200 {
		p := lo + mrand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken: try another
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("kafkabroker: no free port between %d and %d after 200 tries", lo, hi)
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (Linux's /proc/sys/net/ipv4/ip_local_port_range; 32768, its default and
// below the BSDs' 49152, elsewhere).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				return v
			}
		}
	}
	return 32768
}

// tempDir makes a directory for a cluster under one named after this
// process, and removes those of processes that no longer run: a test binary
// that was killed cannot remove its own.
func tempDir() (string, error) {
	root := filepath.Join(os.TempDir(), "kafkabroker")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	mine := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(mine, 0o755); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	dir, err := os.MkdirTemp(mine, "cluster-")
	if err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	return dir, nil
}
