package report

import (
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"coord/lab"
)

// The page is one self-contained file: styles inline, every chart a data:
// URL, no script, nothing fetched. It must read from a file:// URL, an
// attachment or an archive, years later.
var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>coord lab: {{len .Results}} experiment(s), {{.Counts}}</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; color: #222; max-width: 62rem; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { margin-bottom: .3rem; }
table { border-collapse: collapse; }
th, td { text-align: left; vertical-align: top; padding: .25rem .6rem; }
table.summary { width: 100%; }
table.summary th { border-bottom: 2px solid #999; white-space: nowrap; }
table.summary td { border-bottom: 1px solid #eee; }
table.details th { font-weight: normal; color: #555; white-space: nowrap; }
dl { display: grid; grid-template-columns: max-content auto; gap: .15rem 1rem; }
dt { font-weight: 600; } dd { margin: 0; }
.machine, .size { color: #555; }
.verdict { font-weight: 600; padding: 0 .35rem; border-radius: .25rem; }
.reproduced { background: #e3f4e3; } .differs { background: #fff2cc; }
.failed, .error { background: #f8d7d7; } .unavailable { background: #eee; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.missing { color: #a00; }
</style>
</head>
<body>
<h1>coord lab</h1>
<p class="machine">{{.Tool}}, started {{.Started}}, {{printf "%.1f" .Seconds}} s in all; {{.MachineLine}}.</p>

<h2 id="summary">Summary</h2>
<table class="summary">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr><td><a href="#{{.Name}}">{{.Name}}</a></td>{{range .Cells}}<td>{{.}}</td>{{end}}<td><span class="verdict {{.Outcome}}">{{.Outcome}}</span></td></tr>
{{- end}}
</tbody>
</table>
<p>{{len .Results}} experiment(s): {{.Counts}}.</p>
{{range .Legend}}<h3>{{.Title}}</h3>
<dl>{{range .Terms}}<dt>{{.Term}}</dt><dd>{{.Text}}</dd>{{end}}</dl>
{{end}}
<h2 id="experiments">Experiments</h2>
{{range .Results}}
<section id="{{.Name}}">
<h3>{{.Name}} ({{.Rung}}) <span class="verdict {{.Outcome}}">{{.Outcome}}</span></h3>
<p class="size">{{.Size}}</p>
<p>{{.Reason}}</p>
<table class="details">
{{- range .Details}}
<tr><th>{{.Label}}</th><td>{{.Value}}</td></tr>
{{- end}}
</table>
{{range .Charts}}<figure>
{{if .Src}}<img src="{{.Src}}" alt="{{.Title}}" width="680">{{else}}<p class="missing">{{.Title}}: not drawn: {{.Error}}</p>{{end}}
</figure>
{{end}}</section>
{{end}}
</body>
</html>
`))

type pageData struct {
	Tool, Started, MachineLine, Counts string
	Seconds                            float64
	Header                             []string
	Rows                               []pageRow
	Legend                             []pageLegend
	Results                            []pageResult
}

type pageRow struct {
	Name, Outcome string
	Cells         []string
}

type pageLegend struct {
	Title string
	Terms []struct{ Term, Text string }
}

type pageResult struct {
	Name, Rung, Outcome, Size, Reason string
	Details                           []lab.Detail
	Charts                            []pageChart
}

type pageChart struct {
	Title, Error string
	Src          template.URL
}

// writeHTML writes doc as one page: the summary table and its legend, then
// each result with its details and charts. images holds each chart's PNG;
// a chart without one is named on the page as not drawn.
func writeHTML(w io.Writer, doc Document, images map[*lab.Chart][]byte) error {
	m := doc.Machine
	data := pageData{
		Tool: doc.Tool, Started: doc.Started.Format(time.RFC1123), Seconds: doc.Seconds,
		MachineLine: fmt.Sprintf("%s/%s, %s, %d CPUs, GOMAXPROCS %d, load average %.1f",
			m.GOOS, m.GOARCH, m.GoVersion, m.NumCPU, m.GOMAXPROCS, m.LoadAverage),
		Counts: outcomeCounts(doc.Results),
		Header: summaryHeader,
	}
	for _, l := range legend {
		if l.title != "" {
			data.Legend = append(data.Legend, pageLegend{Title: l.title})
		}
		last := &data.Legend[len(data.Legend)-1]
		last.Terms = append(last.Terms, struct{ Term, Text string }{l.term, l.text})
	}
	for _, r := range doc.Results {
		cells := SummaryRow(r)
		data.Rows = append(data.Rows, pageRow{Name: r.Experiment, Outcome: string(r.Verdict.Outcome), Cells: cells[1 : len(cells)-1]})
		pr := pageResult{
			Name: r.Experiment, Rung: r.Rung.String(), Outcome: string(r.Verdict.Outcome),
			Size: sizeLine(r), Reason: r.Verdict.Reason,
			Details: append([]lab.Detail{
				{Label: "articles", Value: r.Articles},
				{Label: "original now", Value: r.Original},
				{Label: "coord now", Value: r.Coord},
			}, r.Details...),
		}
		for i := range r.Charts {
			c := &r.Charts[i]
			pc := pageChart{Title: c.Title}
			if png, ok := images[c]; ok {
				pc.Src = template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png))
			} else {
				pc.Error = "its data could not be drawn (see the command's error)"
			}
			pr.Charts = append(pr.Charts, pc)
		}
		data.Results = append(data.Results, pr)
	}
	return pageTemplate.Execute(w, data)
}

// outcomeCounts says how many results had each outcome: "13 reproduced, 2
// differs".
func outcomeCounts(results []*lab.Result) string {
	counts := map[lab.Outcome]int{}
	for _, r := range results {
		counts[r.Verdict.Outcome]++
	}
	var parts []string
	for _, o := range []lab.Outcome{lab.Reproduced, lab.Differs, lab.Failed, lab.Unavailable, lab.Errored} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
	}
	if len(parts) == 0 {
		return "none run"
	}
	return strings.Join(parts, ", ")
}

// sizeLine says how big a run was: "quick, 30 trials, 1000 procs, seed 7,
// 5.6 s".
func sizeLine(r *lab.Result) string {
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	size := fmt.Sprintf("%s, %d trials", mode, r.Params.Trials)
	if r.Params.Procs > 0 {
		size += fmt.Sprintf(", %d procs", r.Params.Procs)
	}
	return size + fmt.Sprintf(", seed %d, %.1f s", r.Seed, r.Seconds)
}
