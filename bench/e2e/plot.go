package main

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// drawCurve draws the curve into a PNG at path: the end-to-end p50 and p99
// against the request rate offered, both on logarithmic axes, over a panel
// of the CPU seconds per 1,000 events of the pipeline and of the broker;
// caption says which run it is.
func drawCurve(path, caption string, points []*window, t target) error {
	xs := make([]float64, len(points))
	var p50, p99, cpuPipe, cpuBroker []float64
	for i, w := range points {
		xs[i] = float64(w.target)
		p50 = append(p50, millis(w.q(.5)))
		p99 = append(p99, millis(w.q(.99)))
		cpuPipe = append(cpuPipe, w.cost.perKPipeline)
		cpuBroker = append(cpuBroker, w.cost.perKBroker)
	}
	saturated := 0.0
	if last := points[len(points)-1]; last.saturated() != "" {
		saturated = float64(last.target)
	}
	const width, height = 900, 720
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	panels := []panel{{
		title: "mixed load (views + new likes), end to end: API 2xx -> visible in the aggregates",
		unit:  "ms (log)", logY: true,
		series: []series{{"p50", color.RGBA{31, 119, 180, 255}, p50}, {"p99", color.RGBA{214, 39, 40, 255}, p99}},
		refs:   refsFor(t),
	}, {
		title: "CPU seconds per 1,000 events",
		unit:  "s",
		series: []series{
			{"pipeline (services + PostgreSQL)", color.RGBA{44, 160, 44, 255}, cpuPipe},
			{"broker", color.RGBA{255, 127, 14, 255}, cpuBroker},
		},
	}}
	for i, p := range panels {
		top := 10 + i*height/2
		p.draw(img, image.Rect(70, top+30, width-30, top+height/2-50), xs, saturated)
	}
	label(img, width/2-80, height-12, "requests/s offered (log)", color.Black)
	label(img, width-30-textWidth(caption), height-12, caption, axis)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type series struct {
	name  string
	color color.RGBA
	ys    []float64
}

// ref is a horizontal reference line.
type ref struct {
	y    float64
	name string
}

type panel struct {
	title, unit string
	logY        bool
	series      []series
	refs        []ref
}

var (
	grid = color.RGBA{225, 225, 225, 255}
	axis = color.RGBA{90, 90, 90, 255}
)

// draw draws the panel into r (the plot area; titles and tick labels go
// around it): xs on a logarithmic axis, a dashed vertical line at
// saturated when it is not 0.
func (p panel) draw(img *image.RGBA, r image.Rectangle, xs []float64, saturated float64) {
	label(img, r.Min.X, r.Min.Y-12, p.title, color.Black)
	label(img, 8, r.Min.Y-12, p.unit, axis)
	// The legend, right-aligned on the title's line, clear of the data.
	lx := r.Max.X
	for i := len(p.series) - 1; i >= 0; i-- {
		s := p.series[i]
		lx -= textWidth(s.name)
		label(img, lx, r.Min.Y-12, s.name, color.Black)
		lx -= 16
		draw.Draw(img, image.Rect(lx, r.Min.Y-21, lx+12, r.Min.Y-13), image.NewUniform(s.color), image.Point{}, draw.Src)
		lx -= 16
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		for _, y := range s.ys {
			if y > 0 && !math.IsNaN(y) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	for _, rf := range p.refs {
		lo, hi = math.Min(lo, rf.y), math.Max(hi, rf.y)
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	var ticks []float64
	var fy func(float64) float64 // value → 0..1 up the axis
	if p.logY {
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		for d := lo; d < hi*1.01; d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				if v := d * m; v <= hi*1.01 {
					ticks = append(ticks, v)
				}
			}
		}
		fy = func(v float64) float64 { return math.Log(v/lo) / math.Log(hi/lo) }
	} else {
		hi *= 1.1 // headroom above the highest point
		step := niceStep(hi / 5)
		hi = math.Ceil(hi/step) * step
		for v := 0.0; v <= hi*1.0001; v += step {
			ticks = append(ticks, v)
		}
		fy = func(v float64) float64 { return v / hi }
	}
	xlo, xhi := slices.Min(xs)/1.3, slices.Max(xs)*1.3
	px := func(x float64) int {
		return r.Min.X + int(math.Log(x/xlo)/math.Log(xhi/xlo)*float64(r.Dx()))
	}
	py := func(y float64) int { return r.Max.Y - int(fy(y)*float64(r.Dy())) }
	for _, t := range ticks {
		y := py(t)
		line(img, r.Min.X, y, r.Max.X, y, grid, 1, false)
		s := strconv.FormatFloat(t, 'g', 4, 64)
		label(img, r.Min.X-8-textWidth(s), y+4, s, axis)
	}
	for _, x := range xs {
		line(img, px(x), r.Min.Y, px(x), r.Max.Y, grid, 1, false)
		s := strconv.Itoa(int(x))
		label(img, px(x)-textWidth(s)/2, r.Max.Y+16, s, axis)
	}
	line(img, r.Min.X, r.Max.Y, r.Max.X, r.Max.Y, axis, 1, false)
	line(img, r.Min.X, r.Min.Y, r.Min.X, r.Max.Y, axis, 1, false)
	for _, rf := range p.refs {
		line(img, r.Min.X, py(rf.y), r.Max.X, py(rf.y), axis, 1, true)
		label(img, r.Max.X-textWidth(rf.name)-4, py(rf.y)-4, rf.name, axis)
	}
	if saturated > 0 {
		line(img, px(saturated), r.Min.Y, px(saturated), r.Max.Y, axis, 1, true)
		label(img, px(saturated)-textWidth("saturated")-4, r.Min.Y+14, "saturated", axis)
	}
	for _, s := range p.series {
		prevX, prevY, have := 0, 0, false
		for j, y := range s.ys {
			if math.IsNaN(y) || (p.logY && y <= 0) {
				have = false
				continue
			}
			x, yy := px(xs[j]), py(y)
			if have {
				line(img, prevX, prevY, x, yy, s.color, 2, false)
			}
			draw.Draw(img, image.Rect(x-3, yy-3, x+4, yy+4), image.NewUniform(s.color), image.Point{}, draw.Src)
			prevX, prevY, have = x, yy, true
		}
	}
}

// line draws from (x0, y0) to (x1, y1), width pixels thick, dashed or not.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, width int, dashed bool) {
	n := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= n; i++ {
		if dashed && (i/5)%2 == 1 {
			continue
		}
		x := x0 + (x1-x0)*i/n
		y := y0 + (y1-y0)*i/n
		for dx := range width {
			for dy := range width {
				img.Set(x+dx, y+dy, c)
			}
		}
	}
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int { return font.MeasureString(basicfont.Face7x13, s).Round() }

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// refsFor are the latency panel's reference lines: the target at 500
// requests/s and the curve's 50 ms bound, once where they coincide.
func refsFor(t target) []ref {
	refs := []ref{{millis(t.p50), "p50 target at 500 req/s"}, {millis(t.p99), "p99 target at 500 req/s"}}
	if t.p99 != sustainedP99 {
		refs = append(refs, ref{millis(sustainedP99), "50 ms"})
	}
	return refs
}
