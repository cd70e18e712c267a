package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// Algorithms are the JWS algorithms a token may be signed with: asymmetric
// ones only, so that no key in a public key set can ever serve as an HMAC
// secret, and never "none".
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// minRSABits is the smallest RSA modulus accepted (NIST SP 800-131A).
const minRSABits = 2048

// fetchTimeout bounds one read of the key set.
const fetchTimeout = 5 * time.Second

// maxRetry bounds the wait between attempts while the key set cannot be
// read, so that the API recovers soon after the provider does.
const maxRetry = 30 * time.Second

// key is one verification key of the set.
type key struct {
	pub crypto.PublicKey
	alg string // the JWK's alg; "" when it declares none
}

// keyMap is one successfully read key set.
type keyMap struct {
	byKID   map[string]key
	skipped []string // why keys of the set were left out
}

// kids lists the key ids, for logs.
func (m keyMap) kids() []string {
	out := make([]string, 0, len(m.byKID))
	for k := range m.byKID {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parseKeySet parses a JSON Web Key Set (RFC 7517) and keeps the keys a
// token may be verified with: asymmetric (RSA of 2048 bits or more, EC on
// P-256/384/521, Ed25519), for signatures, with a kid. Private members are
// ignored. A set left with no such key is an error.
func parseKeySet(raw []byte) (keyMap, error) {
	var set struct {
		Keys *[]jwkset.JWKMarshal `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return keyMap{}, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if set.Keys == nil {
		return keyMap{}, errors.New(`not a JSON Web Key Set: no "keys" array`)
	}
	km := keyMap{byKID: map[string]key{}}
	for i, m := range *set.Keys {
		k, err := usableKey(m)
		switch {
		case err != nil:
			km.skipped = append(km.skipped, fmt.Sprintf("key %d (kid %q): %v", i, m.KID, err))
		case km.byKID[m.KID].pub != nil:
			km.skipped = append(km.skipped, fmt.Sprintf("key %d: kid %q repeats an earlier key's", i, m.KID))
		default:
			km.byKID[m.KID] = k
		}
	}
	if len(km.byKID) == 0 {
		return keyMap{}, fmt.Errorf("no usable signing key (%s)", strings.Join(append(km.skipped, fmt.Sprintf("%d keys", len(*set.Keys))), "; "))
	}
	return km, nil
}

func usableKey(m jwkset.JWKMarshal) (key, error) {
	if m.KID == "" {
		return key{}, errors.New("no kid: tokens name their key by kid")
	}
	if m.USE != "" && m.USE != jwkset.UseSig {
		return key{}, fmt.Errorf("use %q, not sig", m.USE)
	}
	if m.KTY != jwkset.KtyRSA && m.KTY != jwkset.KtyEC && m.KTY != jwkset.KtyOKP {
		return key{}, fmt.Errorf("kty %q: only RSA, EC and OKP (asymmetric) keys are accepted", m.KTY)
	}
	if m.ALG != "" && !fitsKey(string(m.ALG), m) {
		return key{}, fmt.Errorf("alg %q is not an accepted signature algorithm for kty %s", m.ALG, m.KTY)
	}
	// Only the public half is kept, whatever the document holds.
	m.D, m.P, m.Q, m.DP, m.DQ, m.QI, m.OTH, m.K = "", "", "", "", "", "", nil, ""
	jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
	if err != nil {
		return key{}, err
	}
	pub := jwk.Key()
	if rk, ok := pub.(*rsa.PublicKey); ok && rk.N.BitLen() < minRSABits {
		return key{}, fmt.Errorf("an RSA key of %d bits; at least %d are required", rk.N.BitLen(), minRSABits)
	}
	return key{pub: pub, alg: string(m.ALG)}, nil
}

// fitsKey reports whether alg is an accepted algorithm for a key of m's
// type and curve.
func fitsKey(alg string, m jwkset.JWKMarshal) bool {
	switch m.KTY {
	case jwkset.KtyRSA:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case jwkset.KtyEC:
		return alg == map[jwkset.CRV]string{jwkset.CrvP256: "ES256", jwkset.CrvP384: "ES384", jwkset.CrvP521: "ES512"}[m.CRV]
	case jwkset.KtyOKP:
		return alg == "EdDSA" && m.CRV == jwkset.CrvEd25519
	}
	return false
}

// fitsAlg reports whether a token signed with alg can be verified with k.
// The parser already refused every algorithm outside Algorithms.
func fitsAlg(alg string, k key) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch pub := k.pub.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return alg == map[string]string{"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}[pub.Curve.Params().Name]
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// Errors of a key look-up.
var (
	// errKeysUnavailable: no key set could be read yet, or the read that
	// should have found a new key failed: a token cannot be checked now.
	errKeysUnavailable = errors.New("the signing keys of the identity provider cannot be read")
	// errUnknownKey: the current key set has no key of that id.
	errUnknownKey = errors.New("no key of the identity provider's key set has this kid")
	// errRateLimited: a refresh ran less than the minimum interval ago.
	errRateLimited = errors.New("the key set was read moments ago")
)

// keySet holds the provider's keys: read at start, again every refresh
// interval, and on a token naming an unknown key (at most once per minimum
// interval, so that tokens with made-up kids cannot make the API hammer the
// provider). A read that fails keeps the keys of the last one that worked:
// a token they verify is still genuine. Every read replaces the whole set,
// so a key the provider withdrew stops verifying at the next read.
type keySet struct {
	source  string // the URL or file, for messages
	read    func(ctx context.Context) ([]byte, error)
	every   time.Duration
	minGap  time.Duration
	log     *slog.Logger
	metrics *metrics
	// base ends reads when the service stops; a refresh a request started
	// runs on it, not on the request, so that other requests may share it.
	base context.Context

	keys atomic.Pointer[keyMap]

	mu       sync.Mutex
	lastTry  time.Time     // when a token last started a read
	lastErr  error         // of the last completed read
	inflight chan struct{} // closed when the running read ends
}

func newKeySet(ctx context.Context, cfg Config, client *http.Client, log *slog.Logger, m *metrics) *keySet {
	k := &keySet{every: cfg.JWKSRefresh, minGap: cfg.JWKSMinRefresh, log: log, metrics: m, base: ctx}
	if cfg.JWKSFile != "" {
		k.source = cfg.JWKSFile
		k.read = func(context.Context) ([]byte, error) {
			f, err := os.Open(cfg.JWKSFile)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return readBounded(f)
		}
		return k
	}
	k.source = cfg.JWKSURL
	k.read = func(ctx context.Context) ([]byte, error) { return fetch(ctx, client, cfg.JWKSURL) }
	return k
}

// fetch GETs a key set over HTTP.
func fetch(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET answered %s", resp.Status)
	}
	return readBounded(resp.Body)
}

func readBounded(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxKeySetBytes {
		return nil, errTooLarge
	}
	return raw, nil
}

// load reads the set once and installs it when it parses.
func (k *keySet) load(ctx context.Context) error {
	raw, err := k.read(ctx)
	if err == nil {
		var km keyMap
		if km, err = parseKeySet(raw); err == nil {
			old := k.keys.Swap(&km)
			k.metrics.refreshed(len(km.byKID))
			if old == nil || !equalKIDs(old.kids(), km.kids()) {
				k.log.Info("JWKS loaded", "source", k.source, "kids", km.kids(), "skipped", km.skipped)
			}
			return nil
		}
	}
	k.metrics.refreshFailed()
	return fmt.Errorf("read the key set from %s: %w", k.source, err)
}

func equalKIDs(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// refresh reads the set again and waits for the read, or for ctx. Callers
// arriving while a read runs share it. Reads that tokens ask for (not
// force) start at most once per minGap; one asked for sooner is refused
// with errRateLimited. The scheduled reads (force) do not count: they are
// not the clients' to multiply.
func (k *keySet) refresh(ctx context.Context, force bool) error {
	k.mu.Lock()
	ch := k.inflight
	if ch == nil {
		if !force {
			if !k.lastTry.IsZero() && time.Since(k.lastTry) < k.minGap {
				k.mu.Unlock()
				return errRateLimited
			}
			k.lastTry = time.Now()
		}
		ch = make(chan struct{})
		k.inflight = ch
		go func() {
			err := k.load(k.base)
			if err != nil {
				k.log.Error("JWKS read failed; tokens signed by keys not yet known are refused", "source", k.source, logkey.Err, err)
			}
			k.mu.Lock()
			k.lastErr, k.inflight = err, nil
			k.mu.Unlock()
			close(ch)
		}()
	}
	k.mu.Unlock()
	select {
	case <-ch:
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lastErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lookup returns the key of id kid, reading the set again when the current
// one does not have it (rate limited).
func (k *keySet) lookup(ctx context.Context, kid string) (key, error) {
	if km := k.keys.Load(); km != nil {
		if got, ok := km.byKID[kid]; ok {
			return got, nil
		}
	}
	err := k.refresh(ctx, false)
	km := k.keys.Load()
	if km != nil {
		if got, ok := km.byKID[kid]; ok {
			return got, nil
		}
	}
	k.mu.Lock()
	failing := k.lastErr != nil
	k.mu.Unlock()
	switch {
	case km == nil, failing, err != nil && !errors.Is(err, errRateLimited):
		// No set yet, or the set could not be read again: the key may
		// well exist. The token is neither accepted nor called invalid.
		return key{}, errKeysUnavailable
	}
	return key{}, errUnknownKey
}

// ready fails while no key set has ever been read: no token can be
// verified.
func (k *keySet) ready(context.Context) error {
	if k.keys.Load() == nil {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.lastErr != nil {
			return fmt.Errorf("no key set read yet: %w", k.lastErr)
		}
		return errors.New("no key set read yet")
	}
	return nil
}

// run reads the set every refresh interval until ctx ends; while reads
// fail it tries again sooner, from 1 s doubling up to maxRetry.
func (k *keySet) run(ctx context.Context) {
	retry := time.Second
	for {
		wait := k.every
		k.mu.Lock()
		failing := k.lastErr != nil || k.keys.Load() == nil
		k.mu.Unlock()
		if failing {
			wait = min(retry, k.every)
			retry = min(2*retry, maxRetry)
		} else {
			retry = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		_ = k.refresh(ctx, true)
	}
}
