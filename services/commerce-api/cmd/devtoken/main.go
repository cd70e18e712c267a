// Command devtoken is a stand-in identity provider for trying COMMERCE_API_AUTH_MODE=jwt
// on one machine: it keeps an ES256 key pair in a folder, writes its public
// half as a JSON Web Key Set for COMMERCE_API_AUTH_JWKS_FILE, and prints a token signed
// with it. Never use its keys anywhere but on a developer's machine.
//
//	go run ./services/commerce-api/cmd/devtoken -dir .devauth -sub alice -roles catalog-admin
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

const kid = "devtoken-1"

func main() {
	dir := flag.String("dir", ".devauth", "folder of the key pair (key.pem) and the key set (jwks.json); created when missing")
	iss := flag.String("iss", "http://localhost/devtoken", "the token's iss (COMMERCE_API_AUTH_ISSUER)")
	aud := flag.String("aud", "commerce-api", "the token's aud (COMMERCE_API_AUTH_AUDIENCE)")
	sub := flag.String("sub", "alice", "the token's sub: the acting user")
	roles := flag.String("roles", "", "comma-separated roles, put in the roles claim (catalog-admin may create products)")
	ttl := flag.Duration("ttl", time.Hour, "how long the token is valid")
	flag.Parse()
	if err := run(*dir, *iss, *aud, *sub, *roles, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "devtoken:", err)
		os.Exit(1)
	}
}

func run(dir, iss, aud, sub, roles string, ttl time.Duration) error {
	key, err := loadOrCreate(dir)
	if err != nil {
		return err
	}
	now := time.Now()
	claims := jwt.MapClaims{"iss": iss, "aud": aud, "sub": sub, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix()}
	if roles != "" {
		claims["roles"] = strings.Split(roles, ",")
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	fmt.Println(s)
	return nil
}

// loadOrCreate reads dir/key.pem, or makes a key and writes it with its key
// set dir/jwks.json.
func loadOrCreate(dir string) (*ecdsa.PrivateKey, error) {
	pemPath := filepath.Join(dir, "key.pem")
	raw, err := os.ReadFile(pemPath)
	if err == nil {
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("%s holds no PEM block", pemPath)
		}
		return x509.ParseECPrivateKey(block.Bytes)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgES256, USE: jwkset.UseSig}})
	if err != nil {
		return nil, err
	}
	set, err := json.MarshalIndent(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "jwks.json"), append(set, '\n'), 0o644); err != nil { //nolint:gosec // a public key set
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "devtoken: new key pair in %s; start the API with COMMERCE_API_AUTH_JWKS_FILE=%s\n", dir, filepath.Join(dir, "jwks.json"))
	return key, nil
}
