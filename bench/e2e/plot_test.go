package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDrawCurve(t *testing.T) {
	t.Parallel()
	lat := func(p50, p99 time.Duration) []time.Duration {
		// 100 samples: q(.5) is the 50th, q(.99) the 99th and last.
		ds := make([]time.Duration, 100)
		for i := range ds {
			ds[i] = p50
		}
		ds[98], ds[99] = p99, p99
		return ds
	}
	points := []*window{
		{target: 250, achieved: 250, latencies: lat(3*time.Millisecond, 9*time.Millisecond), cost: cost{perKPipeline: 1.2, perKBroker: 0.4}},
		{target: 500, achieved: 500, latencies: lat(4*time.Millisecond, 12*time.Millisecond), cost: cost{perKPipeline: 0.9, perKBroker: 0.2}},
		{target: 1000, achieved: 600, latencies: lat(40*time.Millisecond, 900*time.Millisecond), cost: cost{perKPipeline: 0.7, perKBroker: 0.1}},
	}
	path := filepath.Join(t.TempDir(), "img", "curve.png")
	if err := drawCurve(path, "Apache Kafka 4.3.1, 20s per rate", points, targetFor(3)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(image.Rect(0, 0, 900, 720), img.Bounds()); diff != "" {
		t.Errorf("size (-want +got):\n%s", diff)
	}
	// Every series is drawn: its colour appears in the figure.
	want := map[string]color.RGBA{
		"p50": {31, 119, 180, 255}, "p99": {214, 39, 40, 255},
		"pipeline CPU": {44, 160, 44, 255}, "broker CPU": {255, 127, 14, 255},
	}
	got := map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
			for name, w := range want {
				if c == w {
					got[name]++
				}
			}
		}
	}
	for name := range want {
		// A marker alone is 49 pixels; with its lines a series has far more.
		if got[name] < 100 {
			t.Errorf("series %s: %d pixels of its colour, want a drawn line", name, got[name])
		}
	}
}

func TestNiceStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		raw  float64
		want float64
	}{
		{"one", 1, 1},
		{"up to two", 1.3, 2},
		{"up to five", 2.5, 5},
		{"up to ten", 7, 10},
		{"small", 0.031, 0.05},
		{"large", 420, 500},
		{"zero", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, niceStep(tc.raw)); diff != "" {
				t.Errorf("niceStep(%v) (-want +got):\n%s", tc.raw, diff)
			}
		})
	}
}
