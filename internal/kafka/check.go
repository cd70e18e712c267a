package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CheckTimeout bounds Check: how long a service waits at start for a broker
// that refuses connections (one that is still starting).
const CheckTimeout = 30 * time.Second

// checkRetry is the pause between rounds of Check while no broker accepts
// connections.
const checkRetry = 500 * time.Millisecond

// Check connects to the brokers the way the services do and returns once one
// of them answered a metadata request through both client libraries
// (franz-go and sarama), each having done its TLS handshake and SASL login: the
// start-up check that stops a service whose connection settings are wrong
// instead of letting it retry in a loop that looks healthy.
//
// A broker that refuses the connection or cannot be reached is tried again
// (every bootstrap broker, every half second) until CheckTimeout or ctx
// ends: a broker that is still starting. Anything else fails at once with
// an error that names the variables to look at, for example
// "KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD: authentication failed" or
// "KAFKA_TLS_CA_FILE: the broker's certificate is signed by an unknown
// authority".
func (s Settings) Check(ctx context.Context) error {
	return s.check(ctx, nil, s.probeKgo, s.probeSarama)
}

// probeTLS does a TLS handshake alone, so that a failure is known to be the
// handshake's, not what follows it (a SASL login, a request). nil when TLS
// is off.
func (s Settings) probeTLS(ctx context.Context, addr string) error {
	if s.TLS == nil {
		return nil
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: s.TLS.config()}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

const varBrokers = "KAFKA_BROKERS"

// clients names what each probe of check runs: the TLS handshake alone,
// franz-go (first: it tells a TLS alert from other closed connections),
// sarama.
var clients = []string{"TLS handshake", "franz-go", "sarama"}

// check runs Check with the TLS probe and probes (the franz-go probe, then
// the sarama one; a nil probe is skipped). unreached, when set, learns of
// each broker found unreachable.
func (s Settings) check(ctx context.Context, unreached func(error), probes ...func(context.Context, string) error) error {
	probes = append([]func(context.Context, string) error{s.probeTLS}, probes...)
	if len(s.Brokers) == 0 {
		return errors.New(varBrokers + ": is required")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	for {
		var last error
	brokers:
		for _, addr := range s.Brokers {
			for i, ask := range probes {
				if ask == nil {
					continue
				}
				err := ask(ctx, addr)
				switch {
				case err == nil:
					continue
				case unreachable(err) || ctx.Err() != nil:
					last = fmt.Errorf("%s (%s): %w", addr, clients[i], err)
					if unreached != nil {
						unreached(last)
					}
					continue brokers
				default:
					return s.explain(addr, clients[i], err)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no broker answered in %s: %w", varBrokers, time.Since(start).Round(100*time.Millisecond), last)
		case <-time.After(checkRetry):
		}
	}
}

func (s Settings) probeSarama(ctx context.Context, addr string) error {
	cfg := s.Config("kafka-check")
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Net.WriteTimeout = 10 * time.Second
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	// sarama's requests take no context; the timeouts above bound them.
	done := make(chan error, 1)
	go func() {
		_, err := b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, nil))
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = b.Close()
		return ctx.Err()
	}
}

func (s Settings) probeKgo(ctx context.Context, addr string) error {
	opts := append(Settings{Brokers: []string{addr}, TLS: s.TLS, SASL: s.SASL}.ClientOptions("kafka-check"),
		kgo.DialTimeout(10*time.Second))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return fmt.Errorf("no seed broker for %s", addr)
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // the brokers only
	_, err = seeds[0].Request(ctx, req)
	return err
}

// unreachable reports whether err means the broker is not there (yet): a
// refused connection, an address that does not resolve yet, a dial that
// timed out. Check tries again on these and on nothing else.
func unreachable(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) ||
		errors.As(err, &op) && op.Op == "dial" && op.Timeout()
}

// explain names the variables behind a failed probe of addr with client.
func (s Settings) explain(addr, client string, err error) error {
	cert, key := credVar(s.Role, credCertFile), credVar(s.Role, credKeyFile)
	user, pass := credVar(s.Role, credUsername), credVar(s.Role, credPassword)
	if s.SASL != nil && s.SASL.PasswordFile != "" {
		pass = credVar(s.Role, credPasswordFile) // where the password came from
	}
	at := fmt.Sprintf("%s (%s)", addr, client)
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case unreachable(err):
		return fmt.Errorf("%s: %s: %w", varBrokers, at, err)
	case errors.As(err, &unknownCA):
		ca := varCAFile
		if s.TLS != nil && len(s.TLS.CA) == 0 {
			ca += " (unset: the system roots)"
		}
		return fmt.Errorf("%s: the broker's certificate is signed by an unknown authority: %s: %w", ca, at, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%s / %s: the broker's certificate is not valid for the name dialled: %s: %w", varServerName, varBrokers, at, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%s: the broker's certificate is not valid: %s: %w", varCAFile, at, err)
	case errors.As(err, &header):
		return fmt.Errorf("%s: the broker does not speak TLS on this listener: %s: %w", varTLS, at, err)
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the broker: after the broker's certificate was
		// accepted, what it refuses is the client's.
		if s.TLS != nil && len(s.TLS.Cert) == 0 {
			return fmt.Errorf("%s / %s: the broker refused the TLS handshake; it may require a client certificate: %s: %w", cert, key, at, err)
		}
		return fmt.Errorf("%s / %s: the broker refused the client certificate; is it signed by a CA the broker trusts? %s: %w", cert, key, at, err)
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed), errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%s / %s: authentication failed (%s %s): %s: %w", pass, user, varMechanism, s.SASL.mechanismName(), at, err)
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("%s: the broker does not enable %s on this listener: %s: %w", varMechanism, s.SASL.mechanismName(), at, err)
	case errors.Is(err, sarama.ErrIllegalSASLState), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("%s: this listener does not use SASL: %s: %w", varMechanism, at, err)
	case strings.Contains(err.Error(), "tls alert record"):
		// franz-go read the broker's TLS alert as a response's size.
		return fmt.Errorf("%s: the broker answered with a TLS alert: this listener uses TLS (set %s=true): %s: %w", varTLS, varTLS, at, err)
	case closed(err) && client == clients[0]:
		return fmt.Errorf("%s: the broker closed the connection during the TLS handshake: is this a plaintext listener (PLAINTEXT, SASL_PLAINTEXT)? %s: %w", varTLS, at, err)
	case closed(err):
		return fmt.Errorf("%s: %s: %w", s.closedHint(), at, err)
	}
	return fmt.Errorf("%s: %s: %w", varBrokers, at, err)
}

func (s *SASL) mechanismName() string {
	if s == nil {
		return "(none)"
	}
	return s.Mechanism
}

// closed reports whether err is the broker ending the connection: what a
// broker does with a request it cannot read as its listener expects.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// closedHint says which settings make a broker close the connection after
// the TLS handshake, if any, went well: it expected what the client did not
// send.
func (s Settings) closedHint() string {
	switch {
	case s.TLS == nil && s.SASL == nil:
		return varTLS + " / " + varMechanism + ": the broker closed the connection: is this a TLS listener (set " + varTLS + "=true) or a SASL listener (set " + varMechanism + ")?"
	case s.TLS == nil:
		return varTLS + ": the broker closed the connection: is this a TLS listener (set " + varTLS + "=true)?"
	case s.SASL == nil:
		return varMechanism + ": the broker closed the connection after the TLS handshake: is this a SASL listener (set " + varMechanism + ")?"
	default:
		return varBrokers + ": the broker closed the connection after the TLS handshake and the SASL login"
	}
}

// CheckAtStart is what a process does with its Kafka settings before it
// starts its work: it logs what is unwise in them (Warnings) and the
// settings themselves (secrets hidden), then runs Check, so that a wrong
// password, an unknown CA or a TLS mismatch stops it at start with an
// error naming the variable, instead of a process that looks healthy and
// reaches nothing.
func (s Settings) CheckAtStart(ctx context.Context, logger *slog.Logger) error {
	for _, w := range s.Warnings() {
		logger.Warn(w)
	}
	logger.Info("connecting to Kafka", "kafka", s)
	if err := s.Check(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}
