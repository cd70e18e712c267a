package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

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
			if got := duplicateKey(json.NewDecoder(strings.NewReader(tc.record))); got != tc.want {
				t.Errorf("duplicateKey(%s) = %q, want %q", tc.record, got, tc.want)
			}
		})
	}
}
