package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// table is one arm's results, printed as text and written as Markdown.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

func (t table) text(out io.Writer) {
	fmt.Fprintln(out, t.title)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(t.header, "\t")+"\t")
	for _, r := range t.rows {
		fmt.Fprintln(w, strings.Join(r, "\t")+"\t")
	}
	_ = w.Flush()
	for _, n := range t.notes {
		fmt.Fprintln(out, "  "+n)
	}
	fmt.Fprintln(out)
}

func (t table) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "**%s**\n\n", t.title)
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(t.header, " | "), strings.Repeat(" --- |", len(t.header)))
	for _, r := range t.rows {
		fmt.Fprintf(b, "| %s |\n", strings.Join(r, " | "))
	}
	b.WriteString("\n")
	for _, n := range t.notes {
		fmt.Fprintf(b, "%s\n", n)
	}
	if len(t.notes) > 0 {
		b.WriteString("\n")
	}
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is "median (min–max)" of xs.
func spread(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	m := fmt.Sprintf(format, median(xs))
	if len(xs) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, fmt.Sprintf(format, slices.Min(xs)), fmt.Sprintf(format, slices.Max(xs)))
}

func ratio(ours, theirs float64) string {
	if theirs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", ours/theirs)
}

func each(runs []consumerRun, f func(consumerRun) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func consumerTables(r clusterRun) []table {
	var ts []table
	if len(r.cells) > 0 {
		t := table{
			title: fmt.Sprintf("Consumers, %d node(s): pcon vs Confluent Parallel Consumer %s, backlog on one 12-partition topic, fresh group per run, median (min–max) of the rounds",
				r.nodes, r.versions[pcSide]),
			header: []string{"cell", "records", "pcon rec/s", "Parallel Consumer rec/s", "ratio", "pcon % of ceiling",
				"pcon CPU s/1k", "Parallel Consumer CPU s/1k", "CPU ratio", "order violations (pcon / PC)"},
			notes: []string{
				"Ceiling: the cap (or fewer keys or partitions, whichever runs fewer at once) ÷ the handler's sleep. " +
					"Records/s from each side's first record handled to its last; CPU is the consumer process's over that window (/proc/<pid>/stat, user + system).",
				"The cap: handler calls at once, pcon's MaxConcurrency (its buffer, MaxInFlight, at its default: four times the cap, at least 1,000) and the Parallel Consumer's maxConcurrency (handler threads). " +
					"The Parallel Consumer: commitMode PERIODIC_CONSUMER_ASYNCHRONOUS, kafka-clients' consumer defaults, auto.offset.reset=earliest; " +
					"pcon: its defaults, the pipeline's sarama configuration (" + r.versions[pconSide] + ").",
			},
		}
		for _, c := range r.cells {
			p, q := c.runs[pconSide], c.runs[pcSide]
			pr, qr := each(p, func(x consumerRun) float64 { return x.rate }), each(q, func(x consumerRun) float64 { return x.rate })
			pc, qc := each(p, consumerRun.cpuPer1k), each(q, consumerRun.cpuPer1k)
			ceiling := "-"
			if ceil := c.cell.ceiling(); ceil > 0 {
				ceiling = fmt.Sprintf("%.0f %%", median(pr)/ceil*100)
			}
			var pv, qv float64
			for _, x := range p {
				pv += float64(x.res.Violations)
			}
			for _, x := range q {
				qv += float64(x.res.Violations)
			}
			violations := "-"
			if c.cell.ordering == "KEY" {
				violations = fmt.Sprintf("%.0f / %.0f", pv, qv)
			}
			t.rows = append(t.rows, []string{
				c.cell.String(), fmt.Sprint(c.n), spread(pr, "%.0f"), spread(qr, "%.0f"), ratio(median(pr), median(qr)), ceiling,
				spread(pc, "%.3f"), spread(qc, "%.3f"), ratio(median(pc), median(qc)), violations,
			})
		}
		ts = append(ts, t)
	}
	if len(r.live) > 0 {
		t := table{
			title:  fmt.Sprintf("Consumers live, %d node(s): records produced at a fixed rate, handled minus intended send time", r.nodes),
			header: []string{"rate", "records", "pcon p50", "pcon p99", "Parallel Consumer p50", "Parallel Consumer p99", "p99 ratio", "pcon CPU s/1k", "Parallel Consumer CPU s/1k"},
		}
		for _, l := range r.live {
			p, q := l.runs[pconSide], l.runs[pcSide]
			t.rows = append(t.rows, []string{
				fmt.Sprintf("%d/s", l.rate), fmt.Sprint(l.n),
				ms(p.res.P50NS), ms(p.res.P99NS), ms(q.res.P50NS), ms(q.res.P99NS),
				ratio(float64(p.res.P99NS), float64(q.res.P99NS)),
				fmt.Sprintf("%.3f", p.cpuPer1k()), fmt.Sprintf("%.3f", q.cpuPer1k()),
			})
		}
		t.notes = []string{"1 ms handler, 1,000 uniform keys, KEY order, the same cap on both sides; each side consumes a topic of its own, produced once its group is stable."}
		ts = append(ts, t)
	}
	return ts
}

func ms(ns int64) string {
	return fmt.Sprintf("%.2f ms", float64(ns)/float64(time.Millisecond))
}

func printConsumers(out io.Writer, r clusterRun) {
	for _, t := range consumerTables(r) {
		t.text(out)
	}
}

// Markers of the peer section in the docs; what lies between them is
// rewritten by -docs.
const (
	docsBegin = "<!-- peers:begin (written by go run ./bench/peers -docs docs/benchmarks.md) -->"
	docsEnd   = "<!-- peers:end -->"
)

// writeDocs replaces the peer section of the Markdown file at path with
// the runs' tables and a chart of the ratios.
func writeDocs(path string, o options, runs []clusterRun) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, docsBegin), strings.Index(doc, docsEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no peer section (%q … %q)", path, docsBegin, docsEnd)
	}
	var s strings.Builder
	s.WriteString(docsBegin + "\n\n")
	fmt.Fprintf(&s, "Measured %s with `go run ./bench/peers %s`.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(argsForDocs(os.Args[1:]), " "))
	for _, r := range runs {
		fmt.Fprintf(&s, "#### %d node(s)\n\n%s.\n\n", r.nodes, r.broker)
		for _, t := range consumerTables(r) {
			t.markdown(&s)
		}
		if r.relay != nil {
			for _, t := range relayTables(o, r) {
				t.markdown(&s)
			}
		}
		s.WriteString(chart(o, r))
	}
	doc = doc[:i] + s.String() + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}

// argsForDocs is the command line that reproduces the run, without -docs
// and its value.
func argsForDocs(args []string) []string {
	var a []string
	for i := 0; i < len(args); i++ {
		switch arg := args[i]; {
		case arg == "-docs" || arg == "--docs":
			i++ // and its value
		case strings.HasPrefix(arg, "-docs=") || strings.HasPrefix(arg, "--docs="):
		default:
			a = append(a, arg)
		}
	}
	return a
}

// bar is one bar of the chart: ours over theirs.
type bar struct {
	label string
	x     float64
}

// chart draws our records/s (or events/s) over the peer's as bars, one per
// cell: a ratio of 1 is the peer's level, marked |.
func chart(o options, r clusterRun) string {
	var bars []bar
	for _, c := range r.cells {
		bars = append(bars, bar{"consumer " + c.cell.String(),
			median(each(c.runs[pconSide], func(x consumerRun) float64 { return x.rate })) /
				median(each(c.runs[pcSide], func(x consumerRun) float64 { return x.rate }))})
	}
	if r.relay != nil {
		bars = append(bars, r.relay.chartBars(o.relayPeers)...)
	}
	if len(bars) == 0 {
		return ""
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Ours ÷ theirs, %d node(s) (throughput; 1× at |, each █ is 0.25×, capped at 8×):\n\n```text\n", r.nodes)
	width := 0
	for _, b := range bars {
		width = max(width, len([]rune(b.label)))
	}
	for _, b := range bars {
		n := int(min(b.x, 8) * 4)
		line := strings.Repeat("█", n)
		if n < 4 {
			line += strings.Repeat(" ", 4-n) + "|"
		} else {
			line = line[:len("█")*4] + "|" + line[len("█")*4:]
		}
		fmt.Fprintf(&s, "%-*s %s %.2f×\n", width, b.label, line, b.x)
	}
	s.WriteString("```\n\n")
	return s.String()
}
