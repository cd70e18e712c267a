package app

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Roles /readyz reports: a standby is ready too (it takes over when the
// leader goes), so the role is information, not a readiness condition.
const (
	RoleLeader  = "leader"
	RoleStandby = "standby"
)

// withRole adds "role": leader|standby to the JSON body of next's /readyz.
func withRole(next http.Handler, leading func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		role := RoleStandby
		if leading() {
			role = RoleLeader
		}
		body := rec.body.Bytes()
		var fields map[string]any
		if json.Unmarshal(body, &fields) == nil {
			fields["role"] = role
			var amended bytes.Buffer
			if json.NewEncoder(&amended).Encode(fields) == nil {
				body = amended.Bytes()
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// recorder buffers a response so that its body can be amended.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
