package pcon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/core"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

func TestKeyResolvers(t *testing.T) {
	t.Parallel()
	r := &Record{Key: []byte("rk"), Headers: []Header{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("tenant"), Value: []byte("acme")}}}
	tests := []struct {
		name string
		kr   KeyResolver
		want string
	}{
		{name: "record key", kr: RecordKey, want: "rk"},
		{name: "header", kr: HeaderKey("tenant"), want: "acme"},
		{name: "missing header means no key", kr: HeaderKey("absent"), want: ""},
		{name: "function", kr: func(r *Record) string { return string(r.Key) + "!" }, want: "rk!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.kr(r); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "plain", err: base, want: false},
		{name: "permanent", err: Permanent(base), want: true},
		{name: "wrapped permanent", err: errors.Join(errors.New("ctx"), Permanent(base)), want: true},
		{name: "nil stays nil", err: Permanent(nil), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := isPermanent(tt.err); got != tt.want {
				t.Errorf("isPermanent = %v", got)
			}
		})
	}
	if !errors.Is(Permanent(base), base) {
		t.Error("Permanent hides its cause from errors.Is")
	}
}

func TestBatchRunnerAttribution(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name string
		ret  error
		want []error
	}{
		{name: "success", ret: nil, want: nil},
		{name: "batch error names records", ret: &BatchError{Failed: map[int]error{1: boom, 7: boom}}, want: []error{nil, boom, nil}},
		{name: "other error fails all", ret: boom, want: []error{boom, boom, boom}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := (&Consumer{}).batchRunner(func(context.Context, []*Record) error { return tt.ret })
			got := run(context.Background(), recordTasks(3))
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(sameError)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a permanent error of a whole batch names no record", func(t *testing.T) {
		t.Parallel()
		perm := Permanent(boom)
		run := (&Consumer{}).batchRunner(func(context.Context, []*Record) error { return perm })
		errs := run(context.Background(), recordTasks(2))
		for i, err := range errs {
			if err == nil || isPermanent(err) || !strings.Contains(err.Error(), "boom") {
				t.Errorf("record %d: error %v, want a non-permanent error naming the cause", i, err)
			}
		}
		if errs := run(context.Background(), recordTasks(1)); !isPermanent(errs[0]) {
			t.Errorf("a batch of one record: error %v, want it permanent", errs[0])
		}
	})
	if got := (&BatchError{Failed: map[int]error{2: boom, 0: boom}}).Error(); got != "pcon: 2 records of the batch failed; [0]: boom; [2]: boom" {
		t.Errorf("Error() = %q", got)
	}
}

// recordTasks returns n tasks whose payload the runner can read, as the
// control plane would hand them over.
func recordTasks(n int) []engine.Task {
	tasks := make([]engine.Task, n)
	h := core.New(core.Config{MaxInFlight: n, MaxAttempts: 1}, core.Deps{
		Submit:    func(ts ...engine.Task) error { copy(tasks, ts); return nil },
		SetPaused: func(bool) {},
	})
	defer h.Close()
	tp := engine.TP{Topic: "t"}
	ep := h.Assign(tp, 0, "")
	items := make([]core.Item, n)
	for i := range items {
		items[i] = core.Item{Offset: int64(i), Payload: &fetched{msg: &sarama.ConsumerMessage{Offset: int64(i)}}}
	}
	h.Add(tp, ep, items, int64(n))
	return tasks
}

// sameError reports whether a and b are one error value: the batch runner
// must return the handler's error itself, not a wrapper of it.
func sameError(a, b error) bool {
	return a == b //nolint:errorlint // identity is what the tests check
}
