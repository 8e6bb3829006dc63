package vllmmetrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func readPage(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const oldPage = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="qwen"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="qwen"} 7.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.875
`

func TestLoad(t *testing.T) {
	t.Parallel()
	m, err := Parse(readPage(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Load()
	// testdata: two engine cores, running 3+2, waiting 1+0, KV usage 0.42 and 0.18.
	if l.Running != 5 || l.Waiting != 1 || math.Abs(l.KVCacheUsage-0.30) > 1e-9 || !l.ModelLoaded {
		t.Errorf("Load = %+v", l)
	}
	ml, ok := l.Models["meta-llama/Llama-3.1-8B-Instruct"]
	if !ok || len(l.Models) != 1 || ml.Running != 5 || ml.Waiting != 1 || math.Abs(ml.KVCacheUsage-0.30) > 1e-9 {
		t.Errorf("Models = %+v", l.Models)
	}
	for _, f := range m.Families {
		if !strings.HasPrefix(f.Name, Prefix) {
			t.Errorf("kept a non-vLLM family %s", f.Name)
		}
	}

	// An older vLLM: gpu_cache_usage_perc.
	m, err = Parse([]byte(oldPage), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Load(); l.Running != 4 || l.Waiting != 7 || l.KVCacheUsage != 0.875 || l.Models["qwen"].KVCacheUsage != 0.875 {
		t.Errorf("old names: %+v", l)
	}

	// Both names (vLLM kept the old one, deprecated, for a while): the new one wins.
	both := oldPage + "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"qwen\"} 0.5\n"
	m, err = Parse([]byte(both), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Load(); l.KVCacheUsage != 0.5 {
		t.Errorf("both names: KV %v, want the new name's 0.5", l.KVCacheUsage)
	}

	// No vLLM gauges (the engine is not up, or not vLLM): nothing loaded.
	m, err = Parse([]byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Load(); l.ModelLoaded || l.Models != nil {
		t.Errorf("a page without vllm: series: %+v", l)
	}
	// Out-of-range and NaN values do not poison the load.
	m, err = Parse([]byte("vllm:kv_cache_usage_perc 1.7\nvllm:num_requests_running NaN\nvllm:num_requests_waiting 2\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Load(); l.KVCacheUsage != 1 || l.Running != 0 || l.Waiting != 2 || l.Models != nil {
		t.Errorf("unlabelled, clamped: %+v", l)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"vllm:x{a=\"1", "line 1: vllm:x: an unterminated label value"},
		{"vllm:x{a=\"1\"", "line 1: vllm:x: labels must be separated by commas"},
		{"vllm:x{a=1} 2\n", "label a: want =\"value\""},
		{"vllm:x{a=\"1\" b=\"2\"} 2\n", "separated by commas"},
		{"vllm:x{a=\"\\q\"} 2\n", "a bad escape"},
		{"vllm:x 1 2 3\n", "at most a timestamp"},
		{"vllm:x one\n", "value \"one\": not a number"},
		{"vllm:x 1 soon\n", "timestamp \"soon\""},
		{"vllm:x\n", "without a value"},
		{"# TYPE vllm:x gaugey\n", "line 1: \"gaugey\" is not a metric type"},
		{"# TYPE vllm:x gauge\n# TYPE vllm:x gauge\n", "line 2: a second # TYPE"},
		{"# TYPE vllm:x gauge\nvllm:x 1\n# TYPE vllm:y gauge\nvllm:x 2\n", "line 4: vllm:x is not next to"},
		{"vllm:x{" + strings.Repeat(`a="1",`, maxLabelsPerEntry+1) + "} 1\n", "more than 64 labels"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.in), 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
	_, err := Parse([]byte(strings.Repeat("vllm:x_total 1\n", 11)), 10)
	if !errors.Is(err, ErrTooManySeries) {
		t.Errorf("11 series with a limit of 10: %v", err)
	}
	// Other metrics are skipped unparsed, whatever their shape.
	if _, err := Parse([]byte("weird{{{ nonsense\n# TYPE process_x whatever\n"), 0); err != nil {
		t.Errorf("non-vLLM lines must be skipped: %v", err)
	}
}

// TestExpose merges two endpoints' pages and checks the result with Prometheus' own parser: one
// HELP and TYPE per family, every sample labelled with its endpoint.
func TestExpose(t *testing.T) {
	t.Parallel()
	a, err := Parse(readPage(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	withEndpoint := strings.Replace(oldPage, "vllm:num_requests_running{model_name=\"qwen\"} 4.0\n",
		"vllm:num_requests_running{model_name=\"qwen\"} 4.0\nvllm:num_requests_running{endpoint=\"inner\",model_name=\"q\\\"x\"} 1\n", 1)
	b, err := Parse([]byte(withEndpoint), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Expose(&out, []Page{{"vllm-a", a}, {`odd"name`, b}, {"none", nil}}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if n := strings.Count(text, "# TYPE vllm:num_requests_running gauge\n"); n != 1 {
		t.Errorf("TYPE of vllm:num_requests_running written %d times", n)
	}
	if n := strings.Count(text, "# HELP vllm:num_requests_running "); n != 1 {
		t.Errorf("HELP of vllm:num_requests_running written %d times", n)
	}
	if strings.Contains(text, "process_") || strings.Contains(text, "http_requests") {
		t.Errorf("non-vLLM metrics exposed")
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition is not valid: %v\n%s", err, text)
	}
	running := fams["vllm:num_requests_running"]
	if running == nil || len(running.Metric) != 4 {
		t.Fatalf("vllm:num_requests_running: %v", running)
	}
	byEndpoint := map[string]float64{}
	for _, m := range running.Metric {
		var ep, exported string
		for _, l := range m.Label {
			switch l.GetName() {
			case "endpoint":
				ep = l.GetValue()
			case "exported_endpoint":
				exported = l.GetValue()
			}
		}
		byEndpoint[ep] += m.GetGauge().GetValue()
		if ep == `odd"name` && m.GetGauge().GetValue() == 1 && exported != "inner" {
			t.Errorf("an upstream's own endpoint label must become exported_endpoint: %v", m.Label)
		}
	}
	if byEndpoint["vllm-a"] != 5 || byEndpoint[`odd"name`] != 5 {
		t.Errorf("running by endpoint: %v", byEndpoint)
	}
	ttft := fams["vllm:time_to_first_token_seconds"]
	if ttft == nil || ttft.GetType().String() != "HISTOGRAM" || len(ttft.Metric) != 2 || len(ttft.Metric[0].GetHistogram().GetBucket()) != 23 {
		t.Errorf("histogram not carried over: %v", ttft)
	}
	// Every sample line carries endpoint first.
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(line, "#") && !strings.Contains(line, `{endpoint="`) {
			t.Errorf("sample without endpoint: %s", line)
		}
	}
}

// TestExposeTypeConflict: a page whose family has another type than the first page's is left
// out of it rather than producing an invalid family.
func TestExposeTypeConflict(t *testing.T) {
	t.Parallel()
	a, _ := Parse([]byte("# TYPE vllm:x gauge\nvllm:x 1\n"), 0)
	b, _ := Parse([]byte("# TYPE vllm:x counter\nvllm:x 2\n"), 0)
	var out bytes.Buffer
	if err := Expose(&out, []Page{{"a", a}, {"b", b}}); err != nil {
		t.Fatal(err)
	}
	if want := "# TYPE vllm:x gauge\nvllm:x{endpoint=\"a\"} 1\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestScrape(t *testing.T) {
	t.Parallel()
	page := readPage(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			if r.Header.Get("Authorization") != "Bearer k" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write(page)
		case "/huge":
			w.Header().Set("Content-Type", "text/plain")
			for range 100 {
				_, _ = w.Write(page)
			}
		case "/block":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	auth := http.Header{"Authorization": {"Bearer k"}}
	m, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics", auth, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Load(); l.Running != 5 {
		t.Errorf("scraped load %+v", l)
	}
	if _, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics", nil, Limits{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("unauthorized scrape: %v", err)
	}
	if _, err := Scrape(ctx, srv.Client(), srv.URL+"/huge", auth, Limits{MaxBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "longer than 1048576") {
		t.Errorf("oversized page: %v", err)
	}
	if _, err := Scrape(ctx, srv.Client(), srv.URL+"/metrics", auth, Limits{MaxSeries: 100}); !errors.Is(err, ErrTooManySeries) {
		t.Errorf("too many series: %v", err)
	}
	if _, err := Scrape(ctx, srv.Client(), srv.URL+"/block", auth, Limits{Timeout: 50e6}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a page that never comes: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(readPage(f))
	f.Add([]byte(oldPage))
	f.Add([]byte("vllm:a{x=\"1\",y=\"a\\\\b\\n\\\"\",} +Inf 123\n# HELP vllm:b h\nvllm:b NaN\n"))
	f.Add([]byte("# TYPE vllm:h histogram\nvllm:h_bucket{le=\"1\"} 1\nvllm:h_sum 2\nvllm:h_count 1\nvllm:h_created 1\n"))
	f.Add([]byte("# TYPE vllm:s summary\nvllm:s{quantile=\"0.5\"} 1\nvllm:s_sum 1\nvllm:s_count 1\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		const maxSeries = 200
		m, err := Parse(body, maxSeries)
		if err != nil {
			return
		}
		n := 0
		for _, fam := range m.Families {
			n += len(fam.Samples)
		}
		if n > maxSeries {
			t.Fatalf("%d series kept, limit %d", n, maxSeries)
		}
		_ = m.Load()
		// What parses re-exposes as a valid page holding the same series, each labelled.
		var out bytes.Buffer
		if err := Expose(&out, []Page{{"e", m}, {"f", m}}); err != nil {
			t.Fatal(err)
		}
		m2, err := Parse(out.Bytes(), 2*maxSeries)
		if err != nil {
			t.Fatalf("re-exposed page does not parse: %v\n%s", err, out.Bytes())
		}
		n2 := 0
		for _, fam := range m2.Families {
			for _, s := range fam.Samples {
				if v, ok := label(s.Labels, "endpoint"); !ok || v != "e" && v != "f" {
					t.Fatalf("sample without its endpoint: %+v", s)
				}
				n2++
			}
		}
		if n2 != 2*n {
			t.Fatalf("%d series re-exposed, want %d\n%s", n2, 2*n, out.Bytes())
		}
	})
}

// BenchmarkParse parses a realistic vLLM page (two engine cores, ~540 vllm: series, 67 KB) with
// this package's parser and, as the baseline, prometheus/common's expfmt text parser.
func BenchmarkParse(b *testing.B) {
	page := readPage(b)
	var ours, theirs float64
	b.Run("vllmmetrics", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(page)))
		for b.Loop() {
			m, err := Parse(page, 0)
			if err != nil {
				b.Fatal(err)
			}
			_ = m.Load()
		}
		ours = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("expfmt", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(page)))
		for b.Loop() {
			p := expfmt.NewTextParser(model.LegacyValidation)
			if _, err := p.TextToMetricFamilies(bytes.NewReader(page)); err != nil {
				b.Fatal(err)
			}
		}
		theirs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if ours > 0 && theirs > 0 {
		b.ReportMetric(ours/theirs, "ours/expfmt")
		fmt.Printf("parse: vllmmetrics %.0f ns/op, expfmt %.0f ns/op, ratio %.3f\n", ours, theirs, ours/theirs)
	}
}

func BenchmarkExpose(b *testing.B) {
	m, err := Parse(readPage(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	pages := []Page{{"a", m}, {"b", m}, {"c", m}, {"d", m}}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := Expose(&buf, pages); err != nil {
			b.Fatal(err)
		}
	}
}
