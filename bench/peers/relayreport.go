package main

import (
	"fmt"
	"io"
	"time"
)

func durations(ps []relayPhase, f func(relayPhase) time.Duration) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = float64(f(p)) / float64(time.Millisecond)
	}
	return out
}

func phases(ps []relayPhase, f func(relayPhase) float64) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = f(p)
	}
	return out
}

// cpuCells are the CPU columns of a side: seconds per 1,000 events of the
// side's process, PostgreSQL's backends and the broker.
func cpuCells(ps []relayPhase) []string {
	var out []string
	for i := range 3 {
		out = append(out, spread(phases(ps, func(p relayPhase) float64 { return p.cpu.per1k(p.n)[i] }), "%.3f"))
	}
	total := phases(ps, func(p relayPhase) float64 {
		c := p.cpu.per1k(p.n)
		return c[0] + c[1] + c[2]
	})
	return append(out, spread(total, "%.3f"))
}

// relayTables are the relay arm's tables: latency per rate, and the drain,
// each side beside the relay with the ratio of the headline figure.
func relayTables(o options, r clusterRun) []table {
	res := r.relay
	notes := []string{
		fmt.Sprintf("Commit → append: a row's commit returned (outbox.Insert, one row per transaction, %d writer connection(s) on the schedule,", o.writers) + " each commit followed by the relay's wake-up as commerce-api sends it) to its record's LogAppendTime (the leader's append, millisecond resolution).",
		"CPU s/1k: seconds of CPU per 1,000 events over the phase (from just before the first commit until every record was read back: a slower side's phase lasts longer, and the idle CPU of the brokers over it counts), from /proc/<pid>/stat: the side's process; PostgreSQL's postmaster and backends (Debezium's WAL sender included), the writers' own backends left out; every broker node.",
		"PostgreSQL: a server of the arm's own (initdb, wal_level=logical, otherwise PostgreSQL's defaults), a fresh database per run; Debezium's slot is dropped after every run.",
	}
	for _, p := range o.relayPeers {
		notes = append(notes, fmt.Sprintf("%s: %s; %s.", p, res.versions[p], p.settings()))
	}
	header := []string{"side", "p50", "p99", "max", "p99 ratio (relay ÷ side)", "side CPU s/1k", "PostgreSQL CPU s/1k", "broker CPU s/1k", "total CPU s/1k"}
	var ts []table
	for _, rate := range o.rates {
		t := table{
			title:  fmt.Sprintf("Relays, %d node(s): commit → broker append at %d commits/s for %s, median (min–max) of %d run(s)", r.nodes, rate, o.latencyTime, max(1, o.relayRounds)),
			header: header,
		}
		ours := median(durations(res.latency[rate][ourRelay], func(p relayPhase) time.Duration { return p.p99 }))
		for _, p := range o.relayPeers {
			ps := res.latency[rate][p]
			p99 := durations(ps, func(p relayPhase) time.Duration { return p.p99 })
			row := []string{string(p),
				spread(durations(ps, func(p relayPhase) time.Duration { return p.p50 }), "%.1f ms"),
				spread(p99, "%.1f ms"),
				spread(durations(ps, func(p relayPhase) time.Duration { return p.max }), "%.1f ms"),
				ratio(ours, median(p99)),
			}
			t.rows = append(t.rows, append(row, cpuCells(ps)...))
		}
		ts = append(ts, t)
	}
	if o.drainRows > 0 {
		t := table{
			title: fmt.Sprintf("Relays, %d node(s): draining %d rows committed in one transaction (COPY), events/s from the commit to the last append",
				r.nodes, o.drainRows),
			header: []string{"side", "events/s", "ratio (relay ÷ side)", "side CPU s/1k", "PostgreSQL CPU s/1k", "broker CPU s/1k", "total CPU s/1k"},
			notes:  notes,
		}
		ours := median(phases(res.drain[ourRelay], func(p relayPhase) float64 { return p.rate }))
		for _, p := range o.relayPeers {
			ps := res.drain[p]
			rate := phases(ps, func(p relayPhase) float64 { return p.rate })
			t.rows = append(t.rows, append([]string{string(p), spread(rate, "%.0f"), ratio(ours, median(rate))}, cpuCells(ps)...))
		}
		ts = append(ts, t)
	} else if len(ts) > 0 {
		ts[len(ts)-1].notes = notes
	}
	return ts
}

func printRelays(out io.Writer, o options, r clusterRun) {
	for _, t := range relayTables(o, r) {
		t.text(out)
	}
}

// chartBars are the relay's drain over each other side's, for the chart,
// in the order of sides.
func (r *relayResults) chartBars(sides []relayPeer) []bar {
	var out []bar
	ours := median(phases(r.drain[ourRelay], func(p relayPhase) float64 { return p.rate }))
	for _, p := range sides {
		ps := r.drain[p]
		if p == ourRelay || ours == 0 || len(ps) == 0 {
			continue
		}
		out = append(out, bar{"drain, relay ÷ " + string(p), ours / median(phases(ps, func(p relayPhase) float64 { return p.rate }))})
	}
	return out
}
