package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of a test's own: it issues the brokers' and
// the clients' certificates for TLS tests, written as PEM files in a
// directory the test removes.
type CA struct {
	// File is the CA certificate's PEM file (a KAFKA_TLS_CA_FILE, a
	// broker's truststore).
	File string
	// PEM is File's content.
	PEM []byte

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Issued is a certificate the CA issued, with its key.
type Issued struct {
	// Cert is the certificate's PEM file, Key its unencrypted PKCS#8
	// private key's, Bundle both in one file (the key first: a broker's PEM
	// keystore).
	Cert, Key, Bundle string
	CertPEM, KeyPEM   []byte
}

// NewCA makes a CA named name (its subject's common name).
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testenv: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testenv: CA %s: %v", name, err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.PEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	ca.File = writeFile(t, ca.dir, name+"-ca.pem", ca.PEM)
	return ca
}

// Issue makes a certificate with common name cn for a server and a client
// alike; hosts (IP addresses or DNS names) are the names a server answers
// to.
func (ca *CA) Issue(t testing.TB, cn string, hosts ...string) Issued {
	t.Helper()
	return ca.IssueWith(t, cn, hosts, nil)
}

// IssueWith is Issue with a last change to the certificate's template (an
// expired validity, say) before it is signed.
func (ca *CA) IssueWith(t testing.TB, cn string, hosts []string, change func(*x509.Certificate)) Issued {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if change != nil {
		change(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testenv: certificate %s: %v", cn, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testenv: key of %s: %v", cn, err)
	}
	is := Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}
	dir, err := os.MkdirTemp(ca.dir, cn+"-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	is.Cert = writeFile(t, dir, "cert.pem", is.CertPEM)
	is.Key = writeFile(t, dir, "key.pem", is.KeyPEM)
	is.Bundle = writeFile(t, dir, "bundle.pem", append(append([]byte(nil), is.KeyPEM...), is.CertPEM...))
	return is
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("testenv: serial: %v", err)
	}
	return n
}

// SecretFile writes content to a file of the test's own that only its
// owner may read, as a mounted Secret is, and returns its path.
func SecretFile(t testing.TB, name, content string) string {
	t.Helper()
	return writeFile(t, t.TempDir(), name, []byte(content))
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return path
}
