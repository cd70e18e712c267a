package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOtherKeyComparesTheKeys: a key that parses is told apart from the
// certificate's by comparing public keys, in each encoding tls reads; what
// is no key at all is not "another key".
func TestOtherKeyComparesTheKeys(t *testing.T) {
	t.Parallel()
	own, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "c"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &own.PublicKey, own)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	encode := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	pkcs8 := func(k any) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return encode("PRIVATE KEY", b)
	}
	sec1, err := x509.MarshalECPrivateKey(own)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for name, key := range map[string][]byte{
		"own, PKCS #8":            pkcs8(own),
		"own, SEC 1":              encode("EC PRIVATE KEY", sec1),
		"another EC key":          pkcs8(other),
		"an RSA key, PKCS #1":     encode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)),
		"the certificate":         encode("CERTIFICATE", der),
		"a key block of no key":   encode("PRIVATE KEY", []byte("junk")),
		"no PEM at all":           []byte("junk"),
		"certificate, then other": append(encode("CERTIFICATE", der), pkcs8(other)...),
	} {
		got[name] = otherKey(leaf, key)
	}
	want := map[string]bool{
		"own, PKCS #8": false, "own, SEC 1": false, "another EC key": true, "an RSA key, PKCS #1": true,
		"the certificate": false, "a key block of no key": false, "no PEM at all": false, "certificate, then other": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("otherKey (-want +got):\n%s", diff)
	}
}
