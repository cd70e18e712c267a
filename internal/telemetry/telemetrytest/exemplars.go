package telemetrytest

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// exemplarLine matches a bucket of event_stage_seconds with its exemplar in
// the OpenMetrics text format.
var exemplarLine = regexp.MustCompile(`(?m)^event_stage_seconds_bucket\{stage="(\w+)",type="([^"]+)",le="([^"]+)"\} \d+ # \{trace_id="([0-9a-f]+)"\} `)

// Exemplars scrapes url (an admin listener's /metrics) asking for
// OpenMetrics, as Prometheus does, and returns the trace id of every
// exemplar of the stage histograms (internal/stages), keyed
// "stage type le". The test fails if the answer is not OpenMetrics.
func Exemplars(t testing.TB, url string) map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("%s answered %s to a scraper asking for OpenMetrics", url, ct)
	}
	out := map[string]string{}
	for _, m := range exemplarLine.FindAllStringSubmatch(string(body), -1) {
		out[m[1]+" "+m[2]+" "+m[3]] = m[4]
	}
	return out
}
