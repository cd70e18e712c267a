package testenv

import (
	"net/http"
	"testing"
)

// Get sends a GET for url with the test's context (cancelled when the test
// ends) and returns the response; the test fails at once if the request
// cannot be sent. The caller closes the body.
func Get(t testing.TB, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
