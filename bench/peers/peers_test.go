package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestMain lets the test binary stand in for this program when the
// benchmark re-runs itself as the pcon or watermill peer.
func TestMain(m *testing.M) {
	if ok, err := runChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/peers:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestArmsTiny runs both arms at a tiny size on one broker (three would
// only add start-up time; the arms' code does not differ by cluster size)
// with every peer: the Parallel Consumer beside pcon, Debezium and
// watermill beside the relay. The harness itself fails a run in which a
// record is missing or a peer's JSON line does not parse; the test checks
// what each side reported on top. A peer that cannot be built (no JDK, no
// Maven, no Maven Central) fails the test with what to install.
func TestArmsTiny(t *testing.T) {
	t.Parallel()
	testenv.Needs(t, "PostgreSQL, Apache Kafka and the JDK")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	o, err := parse([]string{
		"-nodes", "1",
		"-handlers", "1ms", "-keys", "uniform", "-orderings", "KEY", "-caps", "100",
		"-records", "2000", "-cell-time", "2s", "-rounds", "1", "-warmup=false", "-relay-rounds", "1",
		"-live-rates", "500", "-live-time", "2s",
		"-rates", "200", "-latency-time", "2s", "-drain-rows", "2000",
		"-relay-peers", "relay,debezium,watermill",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	runs, err := measure(ctx, &out, o)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d cluster runs, want 1", len(runs))
	}
	r := runs[0]
	if len(r.cells) != 1 {
		t.Fatalf("%d consumer cells, want 1", len(r.cells))
	}
	for _, s := range []side{pconSide, pcSide} {
		for _, run := range r.cells[0].runs[s] {
			if run.res.Handled < 2000 || run.res.Violations != 0 || run.rate <= 0 {
				t.Errorf("%s: handled %d of 2000, %d order violations, %.0f records/s", s, run.res.Handled, run.res.Violations, run.rate)
			}
		}
		if len(r.cells[0].runs[s]) != 1 {
			t.Errorf("%s: %d runs, want 1", s, len(r.cells[0].runs[s]))
		}
		if len(r.live) != 1 || r.live[0].runs[s].res.P99NS <= 0 || r.live[0].runs[s].res.Handled < 1000 {
			t.Errorf("%s: live runs %+v, want one of 1,000 records with a p99", s, r.live)
		}
	}
	if !strings.HasPrefix(r.versions[pcSide], "0.5.3.3") {
		t.Errorf("Parallel Consumer version %q, want 0.5.3.3", r.versions[pcSide])
	}
	for _, p := range o.relayPeers {
		lat, drain := r.relay.latency[200][p], r.relay.drain[p]
		if len(lat) != 1 || lat[0].n != 400 || lat[0].p99 <= 0 {
			t.Errorf("%s: latency phases %+v, want one of 400 events", p, lat)
		}
		if len(drain) != 1 || drain[0].n != 2000 || drain[0].rate <= 0 {
			t.Errorf("%s: drain phases %+v, want one of 2,000 events", p, drain)
		}
		if p != ourRelay && r.relay.versions[p] == "" {
			t.Errorf("%s printed no version", p)
		}
	}
	if v := r.relay.versions[debeziumDefaults]; !strings.HasPrefix(v, "3.6.1.Final") {
		t.Errorf("Debezium version %q, want 3.6.1.Final", v)
	}
	for _, title := range []string{"Consumers, 1 node(s)", "Consumers live", "commit → broker append at 200", "draining 2000 rows"} {
		if !strings.Contains(out.String(), title) {
			t.Errorf("the output lacks %q", title)
		}
	}
}

func TestCells(t *testing.T) {
	t.Parallel()
	c := func(h time.Duration, k keyset, ord string, limit int) consumerCell {
		return consumerCell{h, k, ord, limit}
	}
	ms := time.Millisecond
	tests := []struct {
		name string
		args []string
		want []consumerCell
	}{
		{"default: each axis alone from 1 ms, uniform, KEY, cap 100, every handler at every cap", nil, []consumerCell{
			c(0, uniformKeys, "KEY", 100), c(ms, uniformKeys, "KEY", 100), c(10*ms, uniformKeys, "KEY", 100),
			c(0, uniformKeys, "KEY", 1000), c(ms, uniformKeys, "KEY", 1000), c(10*ms, uniformKeys, "KEY", 1000),
			c(ms, zipfKeys, "KEY", 100), c(ms, hotKey, "KEY", 100), c(ms, distinctKeys, "KEY", 100),
			c(ms, uniformKeys, "PARTITION", 100), c(ms, uniformKeys, "UNORDERED", 100),
		}},
		{"full: every combination", []string{"-full", "-handlers", "0,10ms", "-keys", "hot", "-orderings", "KEY,UNORDERED", "-caps", "100"}, []consumerCell{
			c(0, hotKey, "KEY", 100), c(0, hotKey, "UNORDERED", 100), c(10*ms, hotKey, "KEY", 100), c(10*ms, hotKey, "UNORDERED", 100),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parse(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, o.cells(), cmp.AllowUnexported(consumerCell{})); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
	}
}

func TestArgsForDocs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args, want []string
	}{
		{[]string{"-nodes", "1", "-docs", "docs/benchmarks.md", "-full"}, []string{"-nodes", "1", "-full"}},
		{[]string{"--docs=docs/benchmarks.md", "-rounds", "5"}, []string{"-rounds", "5"}},
		{[]string{"-docs", "x.md"}, nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, argsForDocs(tc.args)); diff != "" {
			t.Errorf("argsForDocs(%q) (-want +got):\n%s", tc.args, diff)
		}
	}
}
