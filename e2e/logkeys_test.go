package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/stack"
)

// TestServiceLogs runs each service briefly along the paths that log (start,
// joining the cluster, taking and standing by for the lease, a like, an
// order paid that depletes the stock, a view, a refused request, a
// graceful stop) and lets start's check reject any record that gives a key
// twice: many log pipelines refuse such a record or keep one value at
// random.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestServiceLogs(t *testing.T) {
	s := newSystem(t)
	relayA, _ := s.startRelay("relay-a")
	relayB, _ := s.startRelay("relay-b")
	consumers := s.startConsumers()

	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "p", "price": 700, "stock": 1}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}
	pid := strconv.FormatInt(p.ID, 10)
	s.expect(s.call("POST", "/products/"+pid+"/likes", "alice", nil, nil), http.StatusOK)
	var o struct{ ID int64 }
	if st := s.call("POST", "/orders", "alice", map[string]any{"items": []map[string]any{{"productId": p.ID, "quantity": 1}}}, &o); st != http.StatusCreated {
		t.Fatalf("create order: %d", st)
	}
	s.expect(s.call("POST", "/orders/"+strconv.FormatInt(o.ID, 10)+"/payments", "alice", nil, nil), http.StatusOK)
	s.expect(s.call("GET", "/products/"+pid, "bob", nil, nil), http.StatusOK)
	s.expect(s.call("POST", "/products", "", map[string]any{"name": ""}, nil), http.StatusBadRequest)

	conn, err := pgx.Connect(t.Context(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	want := map[int64]aggregate{p.ID: {Likes: 1, Sales: 1, Amount: 700, Views: 1}}
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, 60*time.Second)); diff != "" {
		t.Fatalf("aggregates (-want +got):\n%s", diff)
	}
	// Graceful stops log too: leaving the cluster, the lease released, the
	// partitions revoked.
	for _, proc := range []*stack.Proc{consumers, relayB, relayA, s.apiProc} {
		proc.Stop(20 * time.Second)
	}
}

// checkLogKeys fails the test when the log at path holds no JSON record
// (the check would pass for nothing) or a record that gives a key twice.
func checkLogKeys(t *testing.T, name, path string) {
	t.Helper()
	records, problems, err := scanLogKeys(path)
	if err != nil {
		t.Errorf("%s log: %v", name, err)
		return
	}
	if records == 0 {
		t.Errorf("%s logged no JSON record", name)
	}
	for i, p := range problems {
		if i == 3 {
			t.Errorf("%s: %d more records with a key twice", name, len(problems)-i)
			break
		}
		t.Errorf("%s logged %s", name, p)
	}
}

// scanLogKeys reads a JSON-lines log and returns how many records it holds
// and a description of each record that gives a key twice at one level.
// Lines that are not JSON objects (a panic's trace, say) are skipped.
func scanLogKeys(path string) (records int, problems []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		records++
		if dup := duplicateKey(json.NewDecoder(bytes.NewReader(line))); dup != "" {
			problems = append(problems, fmt.Sprintf("a record with the key %q twice: %s", dup, line))
		}
	}
	return records, problems, sc.Err()
}

// duplicateKey returns the first key an object read from d gives twice at
// one level (its nested objects included), or "".
func duplicateKey(d *json.Decoder) string {
	tok, err := d.Token()
	if err != nil {
		return ""
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return ""
			}
			key, _ := k.(string)
			if seen[key] {
				return key
			}
			seen[key] = true
			if dup := duplicateKey(d); dup != "" {
				return dup
			}
		}
		_, _ = d.Token() // '}'
	case json.Delim('['):
		for d.More() {
			if dup := duplicateKey(d); dup != "" {
				return dup
			}
		}
		_, _ = d.Token() // ']'
	}
	return ""
}

func TestDuplicateKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, record, want string }{
		{"distinct keys", `{"msg":"x","service":"api","n":{"a":1,"b":[{"c":1},{"c":2}]}}`, ""},
		{"top level", `{"msg":"joined","service":"a","service":"b"}`, "service"},
		{"nested", `{"msg":"x","n":{"a":1,"a":2}}`, "a"},
		{"in an array", `{"l":[{"k":1,"k":2}]}`, "k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := duplicateKey(json.NewDecoder(strings.NewReader(tc.record))); got != tc.want {
				t.Errorf("duplicateKey(%s) = %q, want %q", tc.record, got, tc.want)
			}
		})
	}
}

// TestScanLogKeys: the log check counts records, skips lines that are not
// JSON, and names each record that gives a key twice.
func TestScanLogKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		log      string
		records  int
		problems int
	}{
		{"clean", `{"msg":"a","service":"x"}` + "\n" + `{"msg":"b","error":"e"}` + "\n", 2, 0},
		{"a key twice", `{"msg":"a"}` + "\n" + `{"msg":"joined","service":"x","service":"y"}` + "\n", 2, 1},
		{"a panic among records", `{"msg":"a"}` + "\npanic: boom\n\ngoroutine 1 [running]:\n", 1, 0},
		{"no record", "exec: not found\n", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(path, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			records, problems, err := scanLogKeys(path)
			if err != nil || records != tc.records || len(problems) != tc.problems {
				t.Errorf("scanLogKeys = %d records, %q, %v; want %d records, %d problems", records, problems, err, tc.records, tc.problems)
			}
		})
	}
}
