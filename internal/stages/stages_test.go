package stages

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func window(stage string, seconds ...float64) Window {
	w := Window{Stage: stage, Buckets: make([]uint64, len(Bounds)+1)}
	for _, s := range seconds {
		w.add(s)
	}
	return w
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		w    Window
		q    float64
		want float64
	}{
		{"empty", window(Apply), 0.5, math.NaN()},
		// 1.2 ms and 1.4 ms both fall in (1 ms, 1.5 ms], capped at the max.
		{"within a bucket, up to the max", window(Apply, .0012, .0014), 1, .0014},
		{"interpolated", window(Apply, .0012, .0014), 0.5, .001 + .0004*0.5/1},
		{"first bucket", window(Apply, .0002, .009, .009, .009), 0.25, .00025},
		{"past the largest bound, to the max", window(Apply, 20, 30), 1, 30},
		{"past the largest bound, max unknown", Window{Stage: Apply, Count: 1, Buckets: append(make([]uint64, len(Bounds)), 1)}, 0.99, 10},
		{"mismatched buckets", Window{Stage: Apply, Count: 1, Buckets: []uint64{1}}, 0.5, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.w.Quantile(tc.q)
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12) {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// A quantile of many observations lands within one bucket's width of the
// exact one: the resolution the bench and the page report with.
func TestQuantileResolution(t *testing.T) {
	t.Parallel()
	var xs []float64
	for i := 1; i <= 1000; i++ {
		xs = append(xs, float64(i)*20e-6) // 20 µs … 20 ms, uniform
	}
	w := window(Publish, xs...)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		exact := xs[int(q*float64(len(xs)))-1]
		if got := w.Quantile(q); math.Abs(got-exact) > 0.0025*exact+20e-6 {
			t.Errorf("p%v = %.6f s, exact %.6f s", q*100, got, exact)
		}
	}
	if got, want := w.Mean(), 10.01e-3; math.Abs(got-want) > 1e-9 {
		t.Errorf("mean %v, want %v", got, want)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	a := window(Apply, .001, .002)
	a.Seconds = 2
	b := window(Apply, .004)
	b.Seconds = 2.1
	foreign := Window{Stage: Apply, Count: 5, Buckets: []uint64{5}}
	other := window(Broker, .5)
	got := Merge(a, b, foreign, other)
	want := window(Apply, .001, .002, .004)
	want.Seconds = 2.1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Window{}, Merge()); diff != "" {
		t.Errorf("Merge of nothing (-want +got):\n%s", diff)
	}
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	r, err := NewRecorder(reg, []string{"loopers.like.created.v1"}, Broker, Apply)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, 0)
	r.now = func() time.Time { return clock }
	r.since = clock

	r.Observe(Apply, "loopers.like.created.v1", 3*time.Millisecond)
	r.Observe(Apply, "forged.type.v9", time.Millisecond)
	r.Observe(Broker, "loopers.like.created.v1", -2*time.Millisecond) // clocks apart: 0
	r.Observe(Outbox, "loopers.like.created.v1", time.Second)         // not this process's stage
	clock = clock.Add(2 * time.Second)

	got := r.Take()
	b, a := window(Broker, 0), window(Apply, .003, .001)
	b.Seconds, a.Seconds = 2, 2
	if diff := cmp.Diff([]Window{b, a}, got); diff != "" {
		t.Errorf("first window (-want +got):\n%s", diff)
	}
	clock = clock.Add(time.Second)
	if got := r.Take(); len(got) != 0 {
		t.Errorf("a window without observations: %+v", got)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, m := range mfs[0].GetMetric() {
		var kv []string
		for _, l := range m.GetLabel() {
			kv = append(kv, l.GetName()+"="+l.GetValue())
		}
		if m.GetHistogram().GetSampleCount() > 0 {
			labels = append(labels, strings.Join(kv, ","))
		}
	}
	if diff := cmp.Diff([]string{"stage=apply,type=loopers.like.created.v1", "stage=apply,type=other", "stage=broker,type=loopers.like.created.v1"}, labels); diff != "" {
		t.Errorf("observed series (-want +got):\n%s", diff)
	}
}

func TestUnknownStage(t *testing.T) {
	t.Parallel()
	if _, err := NewRecorder(prometheus.NewRegistry(), nil, "fetch"); err == nil || !strings.Contains(err.Error(), `"fetch"`) {
		t.Errorf("NewRecorder with an unknown stage: %v", err)
	}
}

// TestFromMetricFamily: a scrape of the histogram, before and after, gives
// back per stage what was observed in between, over every event type.
func TestFromMetricFamily(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	r, err := NewRecorder(reg, []string{"a.v1", "b.v1"}, Publish, Apply)
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]Window {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		ws, err := FromMetricFamily(mfs[0])
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	r.Observe(Apply, "a.v1", 40*time.Millisecond)
	before := read()
	r.Observe(Apply, "a.v1", 2*time.Millisecond)
	r.Observe(Apply, "b.v1", 3*time.Millisecond)
	r.Observe(Apply, "c.v1", 20*time.Second)
	r.Observe(Publish, "b.v1", time.Millisecond)
	after := read()

	want := window(Apply, .002, .003, 20)
	want.Max = 0
	got := after[Apply].Minus(before[Apply])
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("apply since before (-want +got):\n%s", diff)
	}
	if got := after[Publish].Minus(before[Publish]); got.Count != 1 || got.Buckets[3] != 1 {
		t.Errorf("publish since before: %+v", got)
	}
	// Past the largest bound with no max, the quantile answers that bound.
	if q := got.Quantile(1); q != 10 {
		t.Errorf("p100 = %v, want 10 (the largest bound)", q)
	}
}

// TestFromScrapedText: the text format's +Inf bucket is the count, not a
// bucket of Bounds.
func TestFromScrapedText(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	r, err := NewRecorder(reg, nil, Broker)
	if err != nil {
		t.Fatal(err)
	}
	r.Observe(Broker, "x", 30*time.Second)
	r.Observe(Broker, "x", time.Millisecond)
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := FromMetricFamily(fams["event_stage_seconds"])
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[Broker]; w.Count != 2 || w.Buckets[3] != 1 || w.Buckets[len(Bounds)] != 1 {
		t.Errorf("scraped window: %+v", w)
	}
}
