// Package stages times an event's path through the pipeline, stage by stage,
// with the clocks of the components that see it:
//
//	outbox   the outbox insert → the relay's read of the row        (database clock)
//	publish  the relay's read → Kafka's acknowledgement of the record (relay clock)
//	broker   the record's Kafka timestamp → fetched by a consumer   (relay clock → consumer clock)
//	apply    fetched → the aggregate change committed              (consumer clock)
//
// The broker stage is where two clocks meet: the record's timestamp is the
// relay's clock when its producer batched the record (CreateTime, truncated
// to the millisecond by the protocol), the fetch is the consumer's. It reads
// up to 1 ms long on one machine, and off by the clocks' skew across
// machines (a negative difference counts as 0). The record is timestamped
// before the broker acknowledges it, so publish and broker overlap by the
// produce round trip: the stages add up to a little more than the end to
// end.
//
// A Recorder feeds each observation to a Prometheus histogram
// (event_stage_seconds{stage,type}) and to a window that the cluster
// registry's heartbeat takes and publishes in PostgreSQL, where processes
// that cannot scrape each other (the live page's commerce-api) read them.
// An observation of an event whose trace was sampled (ObserveTraced)
// carries the trace's id as the histogram's exemplar (label trace_id),
// which the admin listener's /metrics serves to a scraper that asks for
// OpenMetrics: from a latency bucket to one of its traces.
package stages

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

// The stages, in the order an event passes them.
const (
	Outbox  = "outbox"
	Publish = "publish"
	Broker  = "broker"
	Apply   = "apply"
)

// All lists the stages in pipeline order.
var All = []string{Outbox, Publish, Broker, Apply}

// Bounds are the upper bounds, in seconds, of the histogram buckets: fine
// below 50 ms, where the pipeline's stages live, coarse up to 10 s, where
// only an outage puts them.
var Bounds = []float64{
	.00025, .0005, .00075, .001, .0015, .002, .0025, .003, .004, .005, .006, .008,
	.01, .0125, .015, .02, .025, .03, .04, .05, .075, .1, .15, .25, .5, 1, 2.5, 5, 10,
}

// OtherType is the type label of events whose type is not one the Recorder
// was given: the label's values stay bounded whatever the input.
const OtherType = "other"

// Recorder records stage durations of one process. It is safe for
// concurrent use.
type Recorder struct {
	obs map[string]map[string]prometheus.Observer // stage → type → histogram child

	mu    sync.Mutex
	win   map[string]*Window // stage → current window
	since time.Time
	now   func() time.Time
}

// NewRecorder registers event_stage_seconds on reg and returns a Recorder
// for the given stages, labelling observations by event type: one of types,
// or OtherType.
func NewRecorder(reg prometheus.Registerer, types []string, stages ...string) (*Recorder, error) {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "event_stage_seconds",
		Help:    "Time an event spent in one stage of the pipeline, by stage and event type: outbox (insert → read by the relay, database clock), publish (read → acknowledged by Kafka, relay clock), broker (record timestamp → fetched, relay vs consumer clock), apply (fetched → aggregate committed, consumer clock).",
		Buckets: Bounds,
	}, []string{"stage", "type"})
	if err := reg.Register(hist); err != nil {
		return nil, fmt.Errorf("register stage metrics: %w", err)
	}
	r := &Recorder{obs: map[string]map[string]prometheus.Observer{}, win: map[string]*Window{}, now: time.Now}
	r.since = r.now()
	for _, s := range stages {
		if !slices.Contains(All, s) {
			return nil, fmt.Errorf("stages: unknown stage %q", s)
		}
		r.obs[s] = map[string]prometheus.Observer{OtherType: hist.WithLabelValues(s, OtherType)}
		for _, t := range types {
			r.obs[s][t] = hist.WithLabelValues(s, t)
		}
	}
	return r, nil
}

// Observe records that an event of eventType spent d in stage. A negative d
// (clocks that disagree) counts as 0. A stage the Recorder was not made for
// is ignored.
func (r *Recorder) Observe(stage, eventType string, d time.Duration) {
	r.ObserveTraced(stage, eventType, d, trace.SpanContext{})
}

// ExemplarLabel is the exemplar label holding the trace id, the name
// Prometheus's and Grafana's trace links look for by default.
const ExemplarLabel = "trace_id"

// ObserveTraced is Observe for an event whose trace context is sc (the
// context its writer stored, which the record carries): when sc is valid
// and sampled, the observation is the histogram's exemplar, labelled with
// the trace id; otherwise it is a plain observation. Prometheus keeps the
// latest exemplar per bucket, so each bucket links to a recent trace that
// landed in it.
func (r *Recorder) ObserveTraced(stage, eventType string, d time.Duration, sc trace.SpanContext) {
	byType, ok := r.obs[stage]
	if !ok {
		return
	}
	o, ok := byType[eventType]
	if !ok {
		o = byType[OtherType]
	}
	s := max(d, 0).Seconds()
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() && sc.IsValid() {
		eo.ObserveWithExemplar(s, prometheus.Labels{ExemplarLabel: sc.TraceID().String()})
	} else {
		o.Observe(s)
	}
	r.mu.Lock()
	w := r.win[stage]
	if w == nil {
		w = &Window{Stage: stage, Buckets: make([]uint64, len(Bounds)+1)}
		r.win[stage] = w
	}
	w.add(s)
	r.mu.Unlock()
}

// Take returns what was observed since the previous Take (or the Recorder's
// start), one Window per stage that saw events, in pipeline order, and starts
// new windows.
func (r *Recorder) Take() []Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	span := now.Sub(r.since).Seconds()
	r.since = now
	var out []Window
	for _, s := range All {
		if w := r.win[s]; w != nil {
			w.Seconds = span
			out = append(out, *w)
			delete(r.win, s)
		}
	}
	return out
}

// Window is what one process observed of one stage over a span of its own
// clock: the count, the sum and the maximum, and the count per bucket of
// Bounds (the last one past the largest bound). It is the form the cluster
// registry stores.
type Window struct {
	Stage   string   `json:"stage"`
	Seconds float64  `json:"seconds"` // the span's length
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"` // seconds
	Max     float64  `json:"max"` // seconds; 0 when unknown (from a Prometheus histogram)
	Buckets []uint64 `json:"buckets"`
}

func (w *Window) add(s float64) {
	i, _ := slices.BinarySearch(Bounds, s) // the first bound ≥ s: Prometheus's le
	w.Buckets[i]++
	w.Count++
	w.Sum += s
	w.Max = max(w.Max, s)
}

// Merge adds windows of one stage from several processes (or spans). The
// merged span is the longest. Windows whose buckets do not match Bounds (a
// process of another version) are left out, and so is any of another stage
// than the first.
func Merge(ws ...Window) Window {
	var out Window
	for _, w := range ws {
		if len(w.Buckets) != len(Bounds)+1 || (out.Stage != "" && w.Stage != out.Stage) {
			continue
		}
		if out.Buckets == nil {
			out = Window{Stage: w.Stage, Buckets: make([]uint64, len(Bounds)+1)}
		}
		for i, n := range w.Buckets {
			out.Buckets[i] += n
		}
		out.Count += w.Count
		out.Sum += w.Sum
		out.Max = max(out.Max, w.Max)
		out.Seconds = max(out.Seconds, w.Seconds)
	}
	return out
}

// Mean is the average duration in seconds; NaN without observations.
func (w Window) Mean() float64 {
	if w.Count == 0 {
		return math.NaN()
	}
	return w.Sum / float64(w.Count)
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) in seconds, interpolating
// linearly within its bucket as Prometheus's histogram_quantile does; in the
// last bucket it interpolates up to Max (or answers the largest bound when
// Max is unknown). NaN without observations.
func (w Window) Quantile(q float64) float64 {
	if w.Count == 0 || len(w.Buckets) != len(Bounds)+1 {
		return math.NaN()
	}
	rank := q * float64(w.Count)
	var below float64
	for i, n := range w.Buckets {
		if n == 0 || below+float64(n) < rank {
			below += float64(n)
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = Bounds[i-1]
		}
		var hi float64
		switch {
		case i < len(Bounds):
			hi = Bounds[i]
		case w.Max > lo:
			hi = w.Max
		default:
			return lo
		}
		if w.Max > 0 {
			hi = min(hi, w.Max)
		}
		return lo + (hi-lo)*(rank-below)/float64(n)
	}
	return w.Max
}

// FromMetricFamily reads a scraped event_stage_seconds family into one
// Window per stage, summing over event types. Its buckets come from the
// family's cumulative ones, so only a family with the buckets of Bounds
// can be read; Max is unknown (0).
func FromMetricFamily(mf *dto.MetricFamily) (map[string]Window, error) {
	out := map[string]Window{}
	for _, m := range mf.GetMetric() {
		var stage string
		for _, l := range m.GetLabel() {
			if l.GetName() == "stage" {
				stage = l.GetValue()
			}
		}
		h := m.GetHistogram()
		bs := h.GetBucket()
		if n := len(bs); n > 0 && math.IsInf(bs[n-1].GetUpperBound(), 1) {
			bs = bs[:n-1] // the text format's +Inf bucket, which Count is
		}
		if len(bs) != len(Bounds) {
			return nil, fmt.Errorf("stages: %s has %d buckets, want %d", mf.GetName(), len(bs), len(Bounds))
		}
		w := Window{Stage: stage, Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: make([]uint64, len(Bounds)+1)}
		var below uint64
		for i, b := range bs {
			if b.GetUpperBound() != Bounds[i] {
				return nil, fmt.Errorf("stages: %s bucket %d is le=%v, want %v", mf.GetName(), i, b.GetUpperBound(), Bounds[i])
			}
			w.Buckets[i] = b.GetCumulativeCount() - below
			below = b.GetCumulativeCount()
		}
		w.Buckets[len(Bounds)] = w.Count - below
		out[stage] = Merge(out[stage], w)
	}
	return out, nil
}

// Minus returns what w observed since before, an earlier reading of the
// same counters (Max is not known of a difference).
func (w Window) Minus(before Window) Window {
	if len(before.Buckets) != len(w.Buckets) {
		return w
	}
	out := Window{Stage: w.Stage, Count: w.Count - before.Count, Sum: w.Sum - before.Sum, Buckets: make([]uint64, len(w.Buckets))}
	for i := range w.Buckets {
		out.Buckets[i] = w.Buckets[i] - before.Buckets[i]
	}
	return out
}
