// Package vllmmetrics reads a vLLM server's Prometheus /metrics page: its load (requests running
// and waiting, KV-cache usage, per served model), for health answers and routing, and its vllm:
// series, for re-exposing several servers' pages as one with an endpoint label on every sample.
//
// The parser is a small one of its own, not prometheus/common's expfmt: it keeps only vllm:
// series, as substrings of the body, with a cap on their number, so a scrape costs a bounded and
// small amount of memory (BenchmarkParse compares the two on a realistic page).
package vllmmetrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Prefix starts the name of every metric vLLM exports; others on the page (process_, python_,
// http_) are skipped.
const Prefix = "vllm:"

// The gauges Load reads. vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (the old name
// was kept, deprecated, for a while); both are read, the new one preferred.
const (
	MetricRunning     = "vllm:num_requests_running"
	MetricWaiting     = "vllm:num_requests_waiting"
	MetricKVCache     = "vllm:kv_cache_usage_perc"
	MetricKVCacheOld  = "vllm:gpu_cache_usage_perc"
	labelModel        = "model_name"
	labelEndpoint     = "endpoint"
	maxLabelsPerEntry = 64
)

// DefaultMaxSeries bounds the vllm: series kept from one page. A vLLM server with one model
// exports about 300 per engine core (most of them histogram buckets).
const DefaultMaxSeries = 20000

// Metrics is one parsed page: its vllm: families in page order.
type Metrics struct {
	Families []Family
	index    map[string]int // family name -> its index in Families
	series   int
}

// Family is one metric family: its name as in # TYPE, its help and type, and its samples
// (for a histogram: the _bucket, _sum and _count series).
type Family struct {
	Name, Help, Type string
	Samples          []Sample
}

// Sample is one series' value. Labels is the text between the braces as the page wrote it
// (escapes kept), already checked: it is written back unchanged.
type Sample struct {
	Name   string
	Labels string
	Value  float64
}

// ErrTooManySeries is returned when a page has more vllm: series than allowed.
var ErrTooManySeries = errors.New("vllmmetrics: too many vllm: series")

// Parse reads a Prometheus text exposition (format 0.0.4, as vLLM's prometheus_client writes it)
// and keeps its vllm: families. maxSeries (<= 0: DefaultMaxSeries) bounds the series kept; past
// it Parse fails with ErrTooManySeries. Samples of other metrics are skipped unparsed. A
// malformed vllm: line is an error naming its line number.
func Parse(body []byte, maxSeries int) (*Metrics, error) {
	if maxSeries <= 0 {
		maxSeries = DefaultMaxSeries
	}
	m := &Metrics{index: map[string]int{}}
	text := string(body) // one copy; every name and label set below is a substring of it
	cur := -1            // the family samples go to
	help := map[string]string{}
	for lineNo := 1; len(text) > 0; lineNo++ {
		var line string
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, ""
		}
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		if line[0] == '#' {
			kind, rest, ok := comment(line)
			if !ok || !strings.HasPrefix(rest, Prefix) {
				continue
			}
			name, arg, _ := strings.Cut(rest, " ")
			if !validName(name) {
				return nil, fmt.Errorf("vllmmetrics: line %d: %q is not a metric name", lineNo, name)
			}
			switch kind {
			case "HELP":
				if len(help) >= maxSeries {
					return nil, fmt.Errorf("%w: more than %d # HELP lines", ErrTooManySeries, maxSeries)
				}
				help[name] = arg
				if i, ok := m.index[name]; ok {
					m.Families[i].Help = arg
				}
			case "TYPE":
				switch arg {
				case "counter", "gauge", "histogram", "summary", "untyped":
				default:
					return nil, fmt.Errorf("vllmmetrics: line %d: %q is not a metric type", lineNo, arg)
				}
				if _, dup := m.index[name]; dup {
					return nil, fmt.Errorf("vllmmetrics: line %d: a second # TYPE for %s", lineNo, name)
				}
				if len(m.Families) >= maxSeries {
					return nil, fmt.Errorf("%w: more than %d families", ErrTooManySeries, maxSeries)
				}
				cur = m.add(Family{Name: name, Type: arg, Help: help[name]})
			}
			continue
		}
		if !strings.HasPrefix(line, Prefix) {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("vllmmetrics: line %d: %w", lineNo, err)
		}
		if m.series++; m.series > maxSeries {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManySeries, maxSeries)
		}
		if cur < 0 || !m.Families[cur].owns(s.Name) {
			// A sample without its # TYPE: a family of its own, untyped, as Prometheus reads it.
			i, ok := m.index[s.Name]
			switch {
			case !ok:
				cur = m.add(Family{Name: s.Name, Type: "untyped", Help: help[s.Name]})
			case m.Families[i].Type == "untyped":
				cur = i
			default:
				return nil, fmt.Errorf("vllmmetrics: line %d: %s is not next to its family's other samples", lineNo, s.Name)
			}
		}
		m.Families[cur].Samples = append(m.Families[cur].Samples, s)
	}
	return m, nil
}

// add appends a family and returns its index.
func (m *Metrics) add(f Family) int {
	m.Families = append(m.Families, f)
	m.index[f.Name] = len(m.Families) - 1
	return len(m.Families) - 1
}

// family returns the family named name, nil when there is none.
func (m *Metrics) family(name string) *Family {
	if i, ok := m.index[name]; ok {
		return &m.Families[i]
	}
	return nil
}

// owns reports whether a sample named name belongs to f.
func (f *Family) owns(name string) bool {
	if name == f.Name {
		return f.Type != "histogram"
	}
	suffix, ok := strings.CutPrefix(name, f.Name)
	if !ok {
		return false
	}
	switch f.Type {
	case "histogram":
		return suffix == "_bucket" || suffix == "_sum" || suffix == "_count"
	case "summary":
		return suffix == "_sum" || suffix == "_count"
	}
	return false
}

// comment splits "# HELP name text" / "# TYPE name type"; ok is false for other comments.
func comment(line string) (kind, rest string, ok bool) {
	rest = strings.TrimLeft(line[1:], " \t")
	kind, rest, ok = strings.Cut(rest, " ")
	if !ok || kind != "HELP" && kind != "TYPE" {
		return "", "", false
	}
	return kind, strings.TrimLeft(rest, " \t"), true
}

// parseSample reads `name{labels} value [timestamp]`.
func parseSample(line string) (Sample, error) {
	var s Sample
	end := strings.IndexAny(line, "{ \t")
	if end < 0 {
		return s, errors.New("a sample without a value")
	}
	s.Name = line[:end]
	if !validName(s.Name) {
		return s, fmt.Errorf("%q is not a metric name", s.Name)
	}
	rest := line[end:]
	if rest[0] == '{' {
		n, err := scanLabels(rest)
		if err != nil {
			return s, fmt.Errorf("%s: %w", s.Name, err)
		}
		s.Labels = rest[1 : n-1]
		rest = rest[n:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return s, fmt.Errorf("%s: want a value and at most a timestamp after the labels", s.Name)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("%s: value %q: not a number", s.Name, fields[0])
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return s, fmt.Errorf("%s: timestamp %q: not an integer", s.Name, fields[1])
		}
	}
	s.Value = v
	return s, nil
}

// scanLabels checks the label set that starts s ("{a="x",b="y"}") and returns its length,
// braces included.
func scanLabels(s string) (int, error) {
	i := 1
	seen := 0
	for {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		if seen++; seen > maxLabelsPerEntry {
			return 0, fmt.Errorf("more than %d labels", maxLabelsPerEntry)
		}
		start := i
		for i < len(s) && isNameByte(s[i], i == start, false) {
			i++
		}
		if i == start {
			return 0, errors.New("a label name is missing or invalid")
		}
		if i+1 >= len(s) || s[i] != '=' || s[i+1] != '"' {
			return 0, fmt.Errorf("label %s: want =\"value\"", s[start:i])
		}
		i += 2
		for {
			if i >= len(s) {
				return 0, errors.New("an unterminated label value")
			}
			c := s[i]
			if c == '\\' {
				if i+1 >= len(s) || s[i+1] != '\\' && s[i+1] != '"' && s[i+1] != 'n' {
					return 0, errors.New("a bad escape in a label value")
				}
				i += 2
				continue
			}
			i++
			if c == '"' {
				break
			}
			if c == '\n' {
				return 0, errors.New("a newline in a label value")
			}
		}
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i < len(s) && s[i] == ',' {
			i++
		} else if i >= len(s) || s[i] != '}' {
			return 0, errors.New("labels must be separated by commas")
		}
	}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i], i == 0, true) {
			return false
		}
	}
	return true
}

// isNameByte: metric names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names the same without ':'.
func isNameByte(c byte, first, colon bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || colon && c == ':' || !first && c >= '0' && c <= '9'
}

// label returns the unescaped value of label name in a checked label set, and whether it is there.
func label(labels, name string) (string, bool) {
	for i := 0; i < len(labels); {
		for i < len(labels) && (labels[i] == ',' || labels[i] == ' ') {
			i++
		}
		eq := strings.IndexByte(labels[i:], '=')
		if eq < 0 {
			return "", false
		}
		key := labels[i : i+eq]
		i += eq + 2 // past ="
		var b strings.Builder
		for i < len(labels) && labels[i] != '"' {
			if labels[i] == '\\' {
				i++
				if labels[i] == 'n' {
					b.WriteByte('\n')
				} else {
					b.WriteByte(labels[i])
				}
			} else {
				b.WriteByte(labels[i])
			}
			i++
		}
		i++ // closing quote
		if key == name {
			return b.String(), true
		}
	}
	return "", false
}

// Load is what a vLLM server's page says of its load.
type Load struct {
	// Running and Waiting are requests in execution batches and queued, summed over the
	// server's engine cores and models.
	Running, Waiting float64
	// KVCacheUsage is the fraction (0..1) of KV-cache blocks in use, averaged over engine cores.
	KVCacheUsage float64
	// ModelLoaded: the page carries vLLM's scheduler gauges, which its engine exports once the
	// model is loaded.
	ModelLoaded bool
	// Models is the same per served model (vLLM's model_name label); nil when unlabelled.
	Models map[string]ModelLoad
}

// ModelLoad is one served model's share of a Load.
type ModelLoad struct {
	Running, Waiting, KVCacheUsage float64
}

// Load reads the load gauges.
func (m *Metrics) Load() Load {
	var l Load
	type acc struct{ run, wait, kvSum, kvN float64 }
	per := map[string]*acc{}
	get := func(s Sample) *acc {
		name, ok := label(s.Labels, labelModel)
		if !ok {
			return nil
		}
		a := per[name]
		if a == nil {
			a = &acc{}
			per[name] = a
		}
		return a
	}
	kvName := MetricKVCache
	if f := m.family(MetricKVCache); f == nil || len(f.Samples) == 0 {
		kvName = MetricKVCacheOld
	}
	var kvSum, kvN float64
	for _, f := range m.Families {
		for _, s := range f.Samples {
			if s.Name != f.Name || isNaN(s.Value) {
				continue
			}
			switch f.Name {
			case MetricRunning:
				l.Running += s.Value
				l.ModelLoaded = true
				if a := get(s); a != nil {
					a.run += s.Value
				}
			case MetricWaiting:
				l.Waiting += s.Value
				l.ModelLoaded = true
				if a := get(s); a != nil {
					a.wait += s.Value
				}
			case kvName:
				v := clamp01(s.Value)
				kvSum, kvN = kvSum+v, kvN+1
				if a := get(s); a != nil {
					a.kvSum, a.kvN = a.kvSum+v, a.kvN+1
				}
			}
		}
	}
	if kvN > 0 {
		l.KVCacheUsage = kvSum / kvN
	}
	if len(per) > 0 {
		l.Models = make(map[string]ModelLoad, len(per))
		for name, a := range per {
			ml := ModelLoad{Running: a.run, Waiting: a.wait}
			if a.kvN > 0 {
				ml.KVCacheUsage = a.kvSum / a.kvN
			}
			l.Models[name] = ml
		}
	}
	return l
}

// formatValue writes a value as the text format spells it.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func isNaN(f float64) bool { return f != f }

func clamp01(f float64) float64 { return min(max(f, 0), 1) }

// Page is one endpoint's parsed page, for Expose.
type Page struct {
	Endpoint string
	Metrics  *Metrics
}

// Expose writes the pages' vllm: families as one Prometheus text exposition (format 0.0.4), each
// family once, with its HELP and TYPE from the first page that has it, and an endpoint="<name>"
// label first on every sample. A label already named endpoint is renamed exported_endpoint, as
// Prometheus does. A page whose family has another type than the first one's is left out of that
// family (one family cannot hold both). Families come in the order first seen.
func Expose(w io.Writer, pages []Page) error {
	type member struct {
		endpoint string
		f        *Family
	}
	var order []string
	byName := map[string][]member{}
	for _, p := range pages {
		if p.Metrics == nil {
			continue
		}
		for i := range p.Metrics.Families {
			f := &p.Metrics.Families[i]
			ms, seen := byName[f.Name]
			if !seen {
				order = append(order, f.Name)
			} else if ms[0].f.Type != f.Type {
				continue
			}
			byName[f.Name] = append(ms, member{p.Endpoint, f})
		}
	}
	var b bytes.Buffer
	for _, name := range order {
		ms := byName[name]
		first := ms[0].f
		help := first.Help
		for _, m := range ms {
			if help == "" {
				help = m.f.Help
			}
		}
		if help != "" {
			b.WriteString("# HELP " + name + " " + help + "\n")
		}
		b.WriteString("# TYPE " + name + " " + first.Type + "\n")
		for _, m := range ms {
			ep := escapeLabel(m.endpoint)
			for _, s := range m.f.Samples {
				b.WriteString(s.Name)
				b.WriteString(`{endpoint="`)
				b.WriteString(ep)
				b.WriteByte('"')
				if s.Labels != "" {
					b.WriteByte(',')
					b.WriteString(renameEndpoint(s.Labels))
				}
				b.WriteString("} ")
				b.WriteString(formatValue(s.Value))
				b.WriteByte('\n')
			}
		}
		if b.Len() > 64<<10 {
			if _, err := w.Write(b.Bytes()); err != nil {
				return fmt.Errorf("vllmmetrics: writing the exposition: %w", err)
			}
			b.Reset()
		}
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("vllmmetrics: writing the exposition: %w", err)
	}
	return nil
}

// renameEndpoint renames a label named endpoint in a checked label set to exported_endpoint.
func renameEndpoint(labels string) string {
	if !strings.Contains(labels, labelEndpoint+`="`) {
		return labels
	}
	if _, ok := label(labels, labelEndpoint); !ok {
		return labels // "endpoint=" only inside a value
	}
	// Find the key at a label boundary.
	for i := 0; i < len(labels); {
		for i < len(labels) && (labels[i] == ',' || labels[i] == ' ') {
			i++
		}
		if strings.HasPrefix(labels[i:], labelEndpoint+`="`) {
			return labels[:i] + "exported_" + labels[i:]
		}
		// skip this label
		i += strings.IndexByte(labels[i:], '"') + 1
		for i < len(labels) && labels[i] != '"' {
			if labels[i] == '\\' {
				i++
			}
			i++
		}
		i++
	}
	return labels
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
