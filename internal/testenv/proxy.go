package testenv

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target until closed; then its port
// refuses connections, as a stopped server's does. Tests use it to take a
// database away from the code under test, or to give it one late.
type Proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// NewProxy listens on addr ("127.0.0.1:0" for any port) and forwards every
// connection to target. It closes when the test ends.
func NewProxy(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := &Proxy{ln: ln}
	go p.serve(target)
	t.Cleanup(p.Close)
	return p
}

// ProxyURL returns databaseURL with its host replaced by a new proxy's
// address, and the proxy.
func ProxyURL(t testing.TB, databaseURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := NewProxy(t, "127.0.0.1:0", u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and cuts every forwarded connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *Proxy) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", target) //nolint:noctx // a loopback dial per accepted connection; Close ends the loop
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, d)
		p.mu.Unlock()
		// A copy ends when either side closes or Close cuts both.
		go func() { _, _ = io.Copy(d, c); d.Close() }()
		go func() { _, _ = io.Copy(c, d); c.Close() }()
	}
}
