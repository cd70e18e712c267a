package pcon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
)

func validConfig() Config {
	return Config{Brokers: []string{"localhost:9092"}, Group: "g", Topics: []string{"t"}}
}

// fields lists the fields named by the *ConfigErrors joined in err.
func fields(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	var walk func(error)
	walk = func(err error) {
		var ce *ConfigError
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &ce) {
			out = append(out, ce.Field)
		}
	}
	walk(err)
	return out
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{name: "minimal config is valid", mutate: func(*Config) {}},
		{name: "no brokers", mutate: func(c *Config) { c.Brokers = nil }, want: []string{"Brokers"}},
		{name: "blank broker", mutate: func(c *Config) { c.Brokers = []string{"a:1", " "} }, want: []string{"Brokers[1]"}},
		{name: "no group", mutate: func(c *Config) { c.Group = "" }, want: []string{"Group"}},
		{name: "no topics", mutate: func(c *Config) { c.Topics = nil }, want: []string{"Topics"}},
		{name: "blank topic", mutate: func(c *Config) { c.Topics = []string{""} }, want: []string{"Topics[0]"}},
		{name: "unknown ordering", mutate: func(c *Config) { c.Ordering = 7 }, want: []string{"Ordering"}},
		{name: "negative max in flight", mutate: func(c *Config) { c.MaxInFlight = -1 }, want: []string{"MaxInFlight"}},
		{name: "negative max concurrency", mutate: func(c *Config) { c.MaxConcurrency = -1 }, want: []string{"MaxConcurrency"}},
		{
			name:   "concurrency above the records held",
			mutate: func(c *Config) { c.MaxInFlight, c.MaxConcurrency = 100, 101 },
			want:   []string{"MaxConcurrency"},
		},
		{name: "concurrency alone sizes the buffer", mutate: func(c *Config) { c.MaxConcurrency = 5000 }},
		{name: "negative batch wait", mutate: func(c *Config) { c.Batch.MaxWait = -time.Second }, want: []string{"Batch.MaxWait"}},
		{name: "unknown overflow policy", mutate: func(c *Config) { c.KeyOverflow = 9 }, want: []string{"KeyOverflow"}},
		{name: "negative key queue capacity", mutate: func(c *Config) { c.KeyQueueCapacity = -1 }, want: []string{"KeyQueueCapacity"}},
		{
			name:   "key queue larger than the whole budget",
			mutate: func(c *Config) { c.MaxInFlight, c.KeyQueueCapacity = 10, 11 },
			want:   []string{"KeyQueueCapacity"},
		},
		{name: "negative handler timeout", mutate: func(c *Config) { c.HandlerTimeout = -time.Second }, want: []string{"HandlerTimeout"}},
		{name: "negative silent broker timeout", mutate: func(c *Config) { c.SilentBroker = -time.Second }, want: []string{"SilentBroker"}},
		{name: "static member id", mutate: func(c *Config) { c.InstanceID = "consumer-0" }},
		{name: "invalid static member id", mutate: func(c *Config) { c.InstanceID = "bad id!" }, want: []string{"InstanceID"}},
		{name: "shrinking backoff", mutate: func(c *Config) { c.BackoffMultiplier = 0.5 }, want: []string{"BackoffMultiplier"}},
		{
			name:   "grace not shorter than the rebalance timeout",
			mutate: func(c *Config) { c.RevokeGrace = time.Minute },
			want:   []string{"RevokeGrace"},
		},
		{
			name: "invalid sarama config",
			mutate: func(c *Config) {
				c.Sarama = sarama.NewConfig()
				c.Sarama.Consumer.Fetch.Default = 0
			},
			want: []string{"Sarama"},
		},
		{
			name:   "every problem is reported, in a stable order",
			mutate: func(c *Config) { *c = Config{MaxAttempts: -1, CommitInterval: -1} },
			want:   []string{"Brokers", "Group", "Topics", "CommitInterval", "MaxAttempts"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if diff := cmp.Diff(tt.want, fields(err)); diff != "" {
				t.Errorf("invalid fields (-want +got):\n%s\nerror: %v", diff, err)
			}
			if _, newErr := New(c, RecordHandler(func(context.Context, *Record) error { return nil })); (newErr == nil) != (err == nil) {
				t.Errorf("New error %v disagrees with Validate %v", newErr, err)
			}
		})
	}
}

func TestNewRejectsNilHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    Handler
	}{
		{name: "nil interface", h: nil},
		{name: "nil record handler", h: RecordHandler(nil)},
		{name: "nil batch handler", h: BatchHandler(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(validConfig(), tt.h)
			if diff := cmp.Diff([]string{"handler"}, fields(err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	base := sarama.NewConfig()
	base.Consumer.Offsets.AutoCommit.Enable = true
	c := validConfig()
	c.Sarama = base
	d := c.withDefaults()
	got := map[string]any{
		"MaxInFlight": d.MaxInFlight, "MaxConcurrency": d.MaxConcurrency, "MaxAttempts": d.MaxAttempts, "Backoff": d.Backoff,
		"DLTSuffix": d.DLTSuffix, "CommitInterval": d.CommitInterval, "RevokeGrace": d.RevokeGrace,
		"Batch": d.Batch, "AutoCommit": d.Sarama.Consumer.Offsets.AutoCommit.Enable,
		"KeyQueueCapacity": d.KeyQueueCapacity, "KeyOverflow": d.KeyOverflow, "HandlerTimeout": d.HandlerTimeout,
		"SilentBroker": d.SilentBroker, "caller's sarama config untouched": base.Consumer.Offsets.AutoCommit.Enable,
	}
	want := map[string]any{
		"MaxInFlight": 1000, "MaxConcurrency": 1000, "MaxAttempts": 3, "Backoff": time.Second,
		"DLTSuffix": ".DLT", "CommitInterval": time.Second, "RevokeGrace": 5 * time.Second,
		"Batch":            BatchConfig{MaxRecords: 100, MaxBytes: 1 << 20, MaxWait: 0, Concurrency: 4, MaxRun: 100},
		"KeyQueueCapacity": 250, "KeyOverflow": Block, "HandlerTimeout": time.Duration(0),
		"SilentBroker": 3 * time.Second, "AutoCommit": false, "caller's sarama config untouched": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestConcurrencyDefaults checks how MaxConcurrency and MaxInFlight default
// from each other: the buffer grows with the concurrency asked for, and a
// budget given alone stays one budget.
func TestConcurrencyDefaults(t *testing.T) {
	t.Parallel()
	type bounds struct{ MaxConcurrency, MaxInFlight, KeyQueueCapacity int }
	for _, tt := range []struct {
		name string
		set  bounds
		want bounds
	}{
		{name: "neither", want: bounds{1000, 1000, 250}},
		{name: "small concurrency", set: bounds{MaxConcurrency: 100}, want: bounds{100, 1000, 250}},
		{name: "large concurrency", set: bounds{MaxConcurrency: 1000}, want: bounds{1000, 4000, 1000}},
		{name: "budget alone", set: bounds{MaxInFlight: 100}, want: bounds{100, 100, 25}},
		{name: "both", set: bounds{MaxConcurrency: 100, MaxInFlight: 300}, want: bounds{100, 300, 75}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			c.MaxConcurrency, c.MaxInFlight = tt.set.MaxConcurrency, tt.set.MaxInFlight
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			d := c.withDefaults()
			got := bounds{d.MaxConcurrency, d.MaxInFlight, d.KeyQueueCapacity}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("bounds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []time.Duration // after failures 1, 2, 3, 4
	}{
		{name: "constant by default", cfg: Config{}, want: []time.Duration{time.Second, time.Second, time.Second, time.Second}},
		{
			name: "exponential, capped",
			cfg:  Config{Backoff: 100 * time.Millisecond, BackoffMultiplier: 3, MaxBackoff: time.Second},
			want: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := tt.cfg.withDefaults()
			var got []time.Duration
			for i := 1; i <= 4; i++ {
				got = append(got, d.backoff(i))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
