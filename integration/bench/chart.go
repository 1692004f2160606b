package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The chart: grouped bars of the systems' throughput per workload and
// storage (log scale: the workloads' rates span decades; redis+redsync's
// bar beside W4's in memory), and below them the churn's rate over time. Hand-written SVG: no plotting dependency.
const (
	chartWidth  = 960
	barsTop     = 50
	barsHeight  = 300
	linesTop    = 450
	linesHeight = 200
	chartHeight = 720
	plotLeft    = 80
	plotRight   = chartWidth - 30
)

var systemColor = map[string]string{"sluice": "#1f77b4", "etcd": "#ff7f0e", "redis": "#2ca02c"}

// barsOf are the systems with a bar in r's group and their values:
// sluice and etcd always (a missing one shows as a dash), redis where it
// was measured.
func barsOf(r row) (systems []string, vals []*float64) {
	systems, vals = []string{"sluice", "etcd"}, []*float64{r.Sluice, r.Etcd}
	if r.Redis != nil {
		systems, vals = append(systems, "redis"), append(vals, r.Redis)
	}
	return systems, vals
}

// throughputMetrics are the rows the bars show, one per workload.
var throughputMetrics = map[string]bool{"cycles/s": true, "handoffs/s": true, "grants/s": true, "names/s overall": true}

func (b *bench) chart(rows []row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartWidth, chartHeight)
	var bars []row
	for _, r := range rows {
		if throughputMetrics[r.Metric] {
			bars = append(bars, r)
		}
	}
	barChart(&sb, bars)
	b.churnChart(&sb)
	sb.WriteString("</svg>\n")
	return sb.String()
}

func text(sb *strings.Builder, x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, html.EscapeString(s))
}

func legend(sb *strings.Builder, x, y float64, entries [][2]string) {
	for i, e := range entries {
		ex := x + float64(i)*150
		fmt.Fprintf(sb, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", ex, y-10, e[1])
		text(sb, ex+16, y, "start", "", e[0])
	}
}

// barChart draws the throughput bars on a log scale.
func barChart(sb *strings.Builder, rows []row) {
	title := "Throughput, sluice vs etcd (per second, log scale)"
	entries := [][2]string{{"sluice", systemColor["sluice"]}, {"etcd", systemColor["etcd"]}}
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		_, vals := barsOf(r)
		for _, v := range vals {
			if v != nil && *v > 0 {
				lo, hi = min(lo, *v), max(hi, *v)
			}
		}
		if r.Redis != nil && len(entries) == 2 {
			title = "Throughput, sluice vs etcd and redis+redsync (per second, log scale)"
			entries = append(entries, [2]string{"redis+redsync (W4: 64 keys)", systemColor["redis"]})
		}
	}
	text(sb, chartWidth/2, 24, "middle", `font-size="16" font-weight="bold"`, title)
	legend(sb, plotLeft, 44, entries)
	bottom := float64(barsTop + barsHeight)
	if hi == 0 {
		text(sb, chartWidth/2, barsTop+barsHeight/2, "middle", "", "no throughput measured")
		return
	}
	decLo, decHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if decHi == decLo {
		decHi++
	}
	y := func(v float64) float64 {
		return bottom - (math.Log10(v)-decLo)/(decHi-decLo)*barsHeight
	}
	for d := decLo; d <= decHi; d++ {
		gy := y(math.Pow(10, d))
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, gy, plotRight, gy)
		text(sb, plotLeft-6, gy+4, "end", "", compact(math.Pow(10, d)))
	}
	fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", plotLeft, bottom, plotRight, bottom)
	group := float64(plotRight-plotLeft) / float64(len(rows))
	barW := min(40, group*0.28)
	for i, r := range rows {
		gx := plotLeft + group*float64(i) + group/2
		systems, vals := barsOf(r)
		for j, sys := range systems {
			v := vals[j]
			x := gx - barW*float64(len(systems))/2 + float64(j)*barW
			if v == nil || *v <= 0 {
				text(sb, x+barW/2, bottom-4, "middle", `font-size="10" fill="#888"`, "—")
				continue
			}
			top := y(*v)
			fmt.Fprintf(sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s %s: %s</title></rect>`+"\n",
				x, top, barW-2, bottom-top, systemColor[sys], html.EscapeString(r.Workload), r.Storage, sys, fmtRate(*v))
			text(sb, x+barW/2-1, top-3, "middle", `font-size="10"`, compact(*v))
		}
		text(sb, gx, bottom+16, "middle", "", r.Workload)
		text(sb, gx, bottom+30, "middle", `fill="#555"`, r.Storage)
	}
}

// churnChart draws each churn's rate per interval over time.
func (b *bench) churnChart(sb *strings.Builder) {
	text(sb, chartWidth/2, linesTop-40, "middle", `font-size="16" font-weight="bold"`, "Churn: names/s per 5 s interval")
	type series struct {
		label, color, dash string
		pts                []churnInterval
	}
	var all []series
	maxX, maxY := 0.0, 0.0
	for _, r := range b.runs {
		if r.Churn == nil || len(r.Churn.Intervals) == 0 {
			continue
		}
		s := series{label: r.System + " " + r.Storage, color: systemColor[r.System], pts: r.Churn.Intervals}
		if r.Storage == memory.String() {
			s.dash = `stroke-dasharray="6 4"`
		}
		for _, p := range s.pts {
			maxX, maxY = max(maxX, p.EndSeconds), max(maxY, p.Rate)
		}
		all = append(all, s)
	}
	bottom := float64(linesTop + linesHeight)
	if len(all) == 0 {
		text(sb, chartWidth/2, linesTop+linesHeight/2, "middle", "", "no churn measured")
		return
	}
	maxY = niceCeil(maxY)
	maxX = math.Max(maxX, 1)
	x := func(v float64) float64 { return plotLeft + v/maxX*float64(plotRight-plotLeft) }
	y := func(v float64) float64 { return bottom - v/maxY*linesHeight }
	// Five steps of a 1, 2 or 5 times a power of ten stay round numbers.
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, y(v), plotRight, y(v))
		text(sb, plotLeft-6, y(v)+4, "end", "", compact(v))
	}
	format := "%.0f s"
	if maxX < 10 {
		format = "%.1f s"
	}
	for i := 0; i <= 5; i++ {
		v := maxX * float64(i) / 5
		text(sb, x(v), bottom+16, "middle", "", fmt.Sprintf(format, v))
	}
	text(sb, plotRight, bottom+34, "end", `fill="#555"`, "seconds since the churn began")
	fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", plotLeft, bottom, plotRight, bottom)
	for i, s := range all {
		pts := []string{fmt.Sprintf("%.1f,%.1f", x(0), y(s.pts[0].Rate))}
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.EndSeconds), y(p.Rate)))
		}
		fmt.Fprintf(sb, `<polyline fill="none" stroke="%s" stroke-width="2" %s points="%s"/>`+"\n", s.color, s.dash, strings.Join(pts, " "))
		ly := float64(linesTop - 16)
		lx := float64(plotLeft) + float64(i)*180
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" %s/>`+"\n", lx, ly-4, lx+24, ly-4, s.color, s.dash)
		text(sb, lx+28, ly, "start", "", s.label)
	}
}

// compact prints a rate shortly: 950, 1.2k, 35k.
func compact(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
