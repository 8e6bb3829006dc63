package grafana

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/runtime/app"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/infergate/infergate/surface/batch/batchtest"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// datasource is the one Prometheus data source every panel and query names: the dashboard's
// variable, so one import serves any Grafana whatever its data source is called.
const datasource = "${datasource}"

// maxUnshownShare is how much of what the gateway exposes may have no panel: families that only
// matter with Redis or Kafka, or that duplicate another panel's information, are fine to leave
// out, but a dashboard that ignores most of the gateway's metrics is not doing its job.
const maxUnshownShare = 0.4

// dashboard is the part of Grafana's dashboard model (schemaVersion 39) the checks read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []target       `json:"targets"`
	Panels     []panel        `json:"panels"` // a collapsed row's
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
}

type target struct {
	Expr       string         `json:"expr"`
	RefID      string         `json:"refId"`
	Datasource *datasourceRef `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "...", "refId": "..."}
	Datasource *datasourceRef  `json:"datasource"`
}

// query is a PromQL expression of the dashboard and where it is.
type query struct {
	where, expr string
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("infergate.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d), "infergate.json is not a dashboard")
	return d
}

// allPanels is every panel, those inside collapsed rows included, in order.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// labelValues is Grafana's label_values(metric-selector, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// variableQuery is a query variable's query text, whichever of Grafana's two shapes it has.
func variableQuery(v variable) string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct{ Query string }
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// queries is every PromQL expression of d: the panels' targets and the selectors of the query
// variables (a variable over a renamed metric empties every panel that uses it).
func queries(d dashboard) []query {
	var out []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if m := labelValues.FindStringSubmatch(variableQuery(v)); m != nil {
			out = append(out, query{"variable " + v.Name, m[1]})
		}
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, query{fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID), tg.Expr})
		}
	}
	return out
}

// lint returns what is wrong with d's structure: each problem a line.
func lint(d dashboard) []string {
	var bad []string
	if d.SchemaVersion != 39 {
		bad = append(bad, fmt.Sprintf("schemaVersion %d, want 39", d.SchemaVersion))
	}
	if d.UID == "" || d.Title == "" {
		bad = append(bad, "the dashboard needs a uid and a title")
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || variableQuery(v) != "prometheus" {
		bad = append(bad, "no datasource variable of type datasource over prometheus")
	}
	if v, ok := vars["model"]; !ok || v.Type != "query" || !labelValues.MatchString(variableQuery(v)) {
		bad = append(bad, "no model variable from label_values(...)")
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != datasource) {
			bad = append(bad, fmt.Sprintf("variable %s: datasource is not %s", v.Name, datasource))
		}
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			bad = append(bad, fmt.Sprintf("%s: id already used by %s", name, prev))
		}
		ids[p.ID] = name
		if p.Title == "" {
			bad = append(bad, name+": no title")
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			bad = append(bad, name+": gridPos outside the 24-column grid")
		}
		if p.Type == "row" { // a row holds panels, not queries
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != datasource {
			bad = append(bad, fmt.Sprintf("%s: datasource is not %s", name, datasource))
		}
		if len(p.Targets) == 0 {
			bad = append(bad, name+": no targets")
		}
		refs := map[string]bool{}
		for i, tg := range p.Targets {
			switch {
			case strings.TrimSpace(tg.Expr) == "":
				bad = append(bad, fmt.Sprintf("%s: target %d has no expr", name, i))
			case tg.RefID == "":
				bad = append(bad, fmt.Sprintf("%s: target %d has no refId", name, i))
			case refs[tg.RefID]:
				bad = append(bad, fmt.Sprintf("%s: refId %s used twice", name, tg.RefID))
			case tg.Datasource != nil && tg.Datasource.UID != datasource:
				bad = append(bad, fmt.Sprintf("%s: target %s has datasource %q, not %s", name, tg.RefID, tg.Datasource.UID, datasource))
			}
			refs[tg.RefID] = true
		}
	}
	return bad
}

// aggregators are PromQL's aggregation operators, which may be followed by by/without before
// their parentheses; keywords are the words that are neither functions nor metrics.
var (
	aggregators = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio")
	grouping = set("by", "without", "on", "ignoring", "group_left", "group_right")
	keywords = set("bool", "and", "or", "unless", "offset", "atan2", "inf", "nan")
	// rates are the functions a counter is read through; a gauge read through them is a mistake.
	rates = set("rate", "irate", "increase", "resets")
)

func set(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

// selector is a metric name an expression selects, and whether a rate-like function reads it.
type selector struct {
	name    string
	rateful bool
}

// selectors returns the metric names expr selects. It is a tokenizer, not a parser: it skips
// strings, label matchers ({...}), ranges ([...]), Grafana variables ($x, ${x}), numbers and
// durations, the label lists of by/without/on/ignoring/group_*, and the names of functions and
// aggregations; every other identifier is a metric name. A regular expression over identifiers
// followed by "{" or "[" would miss a bare metric name and take grouping labels for metrics.
func selectors(expr string) ([]selector, error) {
	var out []selector
	var stack []string // the function each open parenthesis belongs to ("" for plain grouping)
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	// skipTo returns the index after the close that balances the open at i, past quoted strings.
	skipTo := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(expr); j++ {
			switch c := expr[j]; c {
			case '"', '\'', '`':
				k := strings.IndexByte(expr[j+1:], c)
				if k < 0 {
					return 0, fmt.Errorf("unterminated string at %d", j)
				}
				j += k + 1
			case open:
				depth++
			case close:
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d", open, i)
	}
	nextNonSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			k := strings.IndexByte(expr[i+1:], c)
			if k < 0 {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			i += k + 2
		case c == '{':
			j, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			if i+1 < len(expr) && expr[i+1] == '{' {
				j, err := skipTo(i+1, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
				break
			}
			for i++; i < len(expr) && isIdent(expr[i]); i++ {
			}
		case c >= '0' && c <= '9' || c == '.':
			for i++; i < len(expr) && (isIdent(expr[i]) || expr[i] == '.'); i++ { // 0.99, 1e3, 5m
			}
		case c == '(':
			stack = append(stack, "")
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			stack = stack[:len(stack)-1]
			i++
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word, next := expr[i:j], nextNonSpace(j)
			switch {
			case grouping[word]:
				if next < len(expr) && expr[next] == '(' {
					k, err := skipTo(next, '(', ')')
					if err != nil {
						return nil, err
					}
					j = k
				}
			case keywords[word] || aggregators[word]:
				// An aggregation's parenthesis may come after by (...): it is pushed as a plain
				// one when reached, since aggregating does not change how its argument is read.
			case next < len(expr) && expr[next] == '(':
				stack = append(stack, word)
				j = next + 1
			default:
				out = append(out, selector{name: word, rateful: slices.ContainsFunc(stack, func(f string) bool { return rates[f] })})
			}
			i = j
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%d unclosed (", len(stack))
	}
	return out, nil
}

// resolve names the family that exposes the series name: a counter's or a gauge's own name, a
// histogram's name_bucket, _sum or _count, a summary's _sum or _count. A histogram's bare family
// name is no series at all in Prometheus, so it does not resolve.
func resolve(name string, types map[string]dto.MetricType) (family string, typ dto.MetricType, ok bool) {
	if t, ok := types[name]; ok && t != dto.MetricType_HISTOGRAM && t != dto.MetricType_SUMMARY {
		return name, t, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(name, suffix)
		if !cut {
			continue
		}
		if t := types[base]; t == dto.MetricType_HISTOGRAM || t == dto.MetricType_SUMMARY && suffix != "_bucket" {
			return base, t, true
		}
	}
	return "", 0, false
}

// check compares the dashboard's queries with the families the gateway exposes (their types):
// problems are the queries naming what is not exposed, or reading it the wrong way (a counter
// without rate(), a gauge through it); used is the families the dashboard shows.
func check(qs []query, types map[string]dto.MetricType) (problems []string, used map[string]bool) {
	used = map[string]bool{}
	for _, q := range qs {
		sels, err := selectors(q.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v in %s", q.where, err, q.expr))
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%s: selects no metric: %s", q.where, q.expr))
		}
		for _, s := range sels {
			family, typ, ok := resolve(s.name, types)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s is not exposed by the gateway", q.where, s.name))
				continue
			}
			used[family] = true
			if strings.HasPrefix(q.where, "variable ") {
				continue // label_values reads any series
			}
			counter := typ == dto.MetricType_COUNTER || typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY
			switch {
			case counter && !s.rateful:
				problems = append(problems, fmt.Sprintf("%s: counter %s is read without rate() or increase()", q.where, s.name))
			case !counter && s.rateful:
				problems = append(problems, fmt.Sprintf("%s: gauge %s is read through rate()", q.where, s.name))
			}
		}
	}
	return problems, used
}

// TestDashboardJSON: the dashboard's structure as Grafana needs it: schemaVersion 39, the
// datasource and model variables, unique panel ids, every panel on ${datasource}, every target
// with an expr and a refId.
func TestDashboardJSON(t *testing.T) {
	t.Parallel()
	for _, p := range lint(loadDashboard(t)) {
		t.Error(p)
	}
}

// TestLintAndSelectors: the checks catch what they are for (each was also seen failing on the
// real dashboard once), and the tokenizer finds exactly the metrics of tricky expressions.
func TestLintAndSelectors(t *testing.T) {
	t.Parallel()
	var d dashboard
	d.SchemaVersion = 38
	d.Panels = []panel{
		{ID: 1, Type: "timeseries", Title: "a", Datasource: &datasourceRef{UID: "prom"}, Targets: []target{{Expr: "up"}}},
		{ID: 1, Type: "timeseries", Title: "b", Datasource: &datasourceRef{UID: datasource}, Targets: []target{{RefID: "A"}}},
	}
	for i := range d.Panels {
		d.Panels[i].GridPos.W, d.Panels[i].GridPos.H = 12, 8
	}
	got := strings.Join(lint(d), "\n")
	for _, want := range []string{"schemaVersion 38", "uid and a title", "no datasource variable", "no model variable",
		`panel 1 "a": datasource is not`, "id already used", "target 0 has no refId", "target 0 has no expr"} {
		assert.Contains(t, got, want)
	}

	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, model) (rate(a_bucket{model=~"$model", code!~"2.."}[$__rate_interval])))`: {"a_bucket"},
		`sum(rate(b_total[5m])) / ignoring(code) group_left sum without (x) (rate(c_total[${__range}]))`:                {"b_total", "c_total"},
		`max by (endpoint) (gauge_one) or on() vector(0)`:                                                               {"gauge_one"},
		`topk(5, sum by (model) (increase(d_total[1h]))) > bool 0.5e1`:                                                  {"d_total"},
		`label_replace(e, "x", "$1", "model", "(.*)") offset 5m`:                                                        {"e"},
	} {
		sels, err := selectors(expr)
		require.NoError(t, err, expr)
		var names []string
		for _, s := range sels {
			names = append(names, s.name)
		}
		assert.Equal(t, want, names, expr)
	}
	_, err := selectors(`sum(rate(x[5m])`)
	assert.Error(t, err)

	types := map[string]dto.MetricType{"c_total": dto.MetricType_COUNTER, "g": dto.MetricType_GAUGE, "h": dto.MetricType_HISTOGRAM}
	problems, used := check([]query{
		{"p1", `rate(c_total[5m])`}, {"p2", `c_total`}, {"p3", `rate(g[5m])`}, {"p4", `h`},
		{"p5", `histogram_quantile(0.5, rate(h_bucket[5m]))`}, {"p6", `rate(missing_total[5m])`}, {"p7", `vector(1)`},
	}, types)
	assert.Equal(t, []string{
		"p2: counter c_total is read without rate() or increase()",
		"p3: gauge g is read through rate()",
		"p4: h is not exposed by the gateway",
		"p6: missing_total is not exposed by the gateway",
		"p7: selects no metric: vector(1)",
	}, problems)
	assert.Equal(t, map[string]bool{"c_total": true, "g": true, "h": true}, used)
}

// logBuffer keeps the gateway's warnings for the test's failure report: logging to t from the
// gateway's goroutines could outlive the test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startGateway builds the gateway of yaml in process and serves it on a loopback port until the
// test ends, as the runtime's main does (runtime/app's tests have the same few lines, unexported).
func startGateway(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := app.ParseConfig("dashboard-test", []byte(yaml))
	require.NoError(t, err)
	logs := new(logBuffer)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := app.Build(cfg, app.RoleGateway, gateway.Config{Logger: log, DrainTimeout: time.Second})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Gateway.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // t.Context is done by now
		defer cancel()
		_ = a.Gateway.Shutdown(ctx)
		<-done
		a.Close()
		if t.Failed() {
			t.Logf("gateway warnings:\n%s", logs)
		}
	})
	return "http://" + ln.Addr().String()
}

// client sends the test's requests to the gateway and checks their status.
type client struct {
	t    *testing.T
	base string
}

// call sends body (JSON unless hdr sets Content-Type) and returns the status, the headers and the
// body of the answer.
func (c client) call(method, path string, body []byte, hdr ...string) (int, http.Header, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, bytes.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res.StatusCode, res.Header, string(b)
}

// expect sends a request and requires the status.
func (c client) expect(status int, method, path, body string, hdr ...string) (http.Header, string) {
	c.t.Helper()
	got, h, b := c.call(method, path, []byte(body), hdr...)
	require.Equal(c.t, status, got, "%s %s: %s", method, path, b)
	return h, b
}

// chat is a chat completion's body at temperature 0 (cacheable); extra, when not "", is more
// members, each followed by a comma.
func chat(model, question, extra string) string {
	return `{"model":"` + model + `","temperature":0,` + extra + `"messages":[{"role":"user","content":"` + question + `"}]}`
}

// exercise sends the gateway one request of every kind the dashboard shows: chat completions
// (whole and streamed, each twice for a cache hit), a semantic cache, a session, the KServe
// surface (a built-in model, dynamically batched, and one of a KServe upstream), the Responses
// and Messages APIs, a batch, disaggregated models, and what the guard refuses: a rate limit, an
// open circuit breaker, an endpoint cooling down after a 429, a body that inflates too far.
func exercise(t *testing.T, c client, up *openaitest.Upstream) {
	// The OpenAI surface and the exact cache: a miss, a hit, a streamed miss (the upstream's
	// chunks: time to first token, inter-token latency) and its replay, a request that may
	// sample (bypass).
	for _, want := range []string{"miss", "hit"} {
		h, _ := c.expect(http.StatusOK, "POST", "/v1/chat/completions", chat("m", "What is the capital of France?", ""))
		assert.Equal(t, want, h.Get("X-Infergate-Cache"))
	}
	for range 2 {
		c.expect(http.StatusOK, "POST", "/v1/chat/completions",
			chat("m", "And of Spain?", `"stream":true,"stream_options":{"include_usage":true},`))
	}
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", `{"model":"m","temperature":0.9,"messages":[{"role":"user","content":"Surprise me"}]}`)
	// The semantic cache: a miss, then a hit; one whose embeddings model does not exist, which
	// counts a store error (op embed) and bypasses the cache.
	for range 2 {
		c.expect(http.StatusOK, "POST", "/v1/chat/completions", chat("sem", "what is the capital of france", ""))
	}
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", chat("sem2", "what is the capital of italy", ""))

	sessions(t, c, up)

	// KServe: simple switched to dynamic batching (Triton's load with a config override), an
	// infer, a failing one (a wrong shape), and the KServe upstream's model.
	c.expect(http.StatusOK, "POST", "/v2/repository/models/simple/load",
		`{"parameters":{"config":"{\"max_batch_size\":8,\"dynamic_batching\":{}}"}}`)
	infer := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`
	c.expect(http.StatusOK, "POST", "/v2/models/simple/infer", infer)
	c.expect(http.StatusOK, "POST", "/v2/models/remote_simple/infer", infer)
	status, _, b := c.call("POST", "/v2/models/simple/infer", []byte(strings.ReplaceAll(infer, "[1,16]", "[1,15]")))
	assert.Equal(t, http.StatusBadRequest, status, b)

	// The Responses API and Anthropic's Messages API, translated onto chat completions; a
	// Messages request that cannot be translated.
	c.expect(http.StatusOK, "POST", "/v1/responses", `{"model":"m","input":"hi"}`)
	c.expect(http.StatusOK, "POST", "/v1/messages", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		"Anthropic-Version", "2023-06-01")
	status, _, b = c.call("POST", "/v1/messages", []byte(`{"model":"m","max_tokens":16,"messages":"hi"}`))
	assert.Equal(t, http.StatusBadRequest, status, b)

	// A disaggregated model: a prompt long enough to be prefilled on the prefill engine.
	long := strings.Repeat("A long prompt that is worth prefilling elsewhere. ", 20)
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", `{"model":"pd","max_tokens":2,"messages":[{"role":"user","content":"`+long+`"}]}`)
	// One whose prefill engine fails: decoded locally, a fallback of the prefill leg.
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", `{"model":"pdfail","max_tokens":2,"messages":[{"role":"user","content":"`+long+`"}]}`)

	// The guard: a model's budget of one request a minute, then 429; an upstream failing with
	// 500 opens its circuit breaker (one failure trips it here): the next request finds no
	// endpoint; a body that inflates past max_decompressed_bytes.
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", chat("limited", "One", ""))
	c.expect(http.StatusTooManyRequests, "POST", "/v1/chat/completions", chat("limited", "Two", ""))
	for _, want := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
		status, _, b := c.call("POST", "/v1/chat/completions", []byte(chat("broken", "Hi", "")))
		assert.Equal(t, want, status, b)
	}
	// An upstream answering 429 cools its endpoint down: the breaker refuses the next request.
	for _, want := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		status, _, b := c.call("POST", "/v1/chat/completions", []byte(chat("busy", "Hi", "")))
		assert.Equal(t, want, status, b)
	}
	// The KServe REST surface inflates compressed bodies (the OpenAI routes do not).
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(infer + strings.Repeat(" ", 128<<10)))
	require.NoError(t, zw.Close())
	status, _, b = c.call("POST", "/v2/models/simple/infer", gz.Bytes(), "Content-Encoding", "gzip")
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, b)

	// A batch of one line, run by the gateway's own worker.
	file := batchtest.Upload(t, c.base, "", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":`+chat("m", "In a batch", "")+"}\n")
	_, body := c.expect(http.StatusOK, "POST", "/v1/batches", `{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	var batch struct{ ID, Status string }
	require.NoError(t, json.Unmarshal([]byte(body), &batch))
	for deadline := time.Now().Add(10 * time.Second); batch.Status != "completed"; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "batch %s: %s", batch.ID, body)
		_, body = c.expect(http.StatusOK, "GET", "/v1/batches/"+batch.ID, "")
		require.NoError(t, json.Unmarshal([]byte(body), &batch))
	}
}

// sessions runs a session's turns: a streamed one without usage (the gateway counts the prompt
// with the model's tokenizer), one whose history no longer fits the context window (trimmed),
// and two at once (the second waits for the first's lock, then gets 409 after the 2 s the
// gateway waits: the only slow part of the test); then deletes it.
func sessions(t *testing.T, c client, up *openaitest.Upstream) {
	_, body := c.expect(http.StatusCreated, "POST", "/v1/sessions", `{"model":"s"}`)
	var sess struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &sess))
	turn := func(text, extra string) string {
		return chat("s", text, extra+`"max_tokens":4,"session_id":"`+sess.ID+`",`)
	}
	c.expect(http.StatusOK, "POST", "/v1/chat/completions", turn(strings.Repeat("word ", 20), `"stream":true,`))
	h, _ := c.expect(http.StatusOK, "POST", "/v1/chat/completions", turn(strings.Repeat("more ", 25), ""))
	assert.NotEmpty(t, h.Get("X-Infergate-Session-Trimmed-Tokens"), "the first turn no longer fits")

	for len(up.Started()) > 0 {
		<-up.Started()
	}
	release := up.Hold()
	defer release()
	first := make(chan int, 1)
	go func() { first <- statusOf(c, "POST", "/v1/chat/completions", turn("First", "")) }()
	select {
	case <-up.Started():
	case <-time.After(10 * time.Second):
		t.Fatal("the first turn never reached the upstream")
	}
	status, _, b := c.call("POST", "/v1/chat/completions", []byte(turn("Second", "")))
	assert.Equal(t, http.StatusConflict, status, b)
	release()
	assert.Equal(t, http.StatusOK, <-first)
	c.expect(http.StatusOK, "DELETE", "/v1/sessions/"+sess.ID, "")
}

// TestDashboardMetrics: every metric the dashboard's queries name is one the gateway exposes,
// read as its type wants (counters through rate()), once the gateway served one request of each
// kind; and the dashboard shows most of the infergate_ and nv_ families the gateway exposes.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	qs := queries(d)
	require.NotEmpty(t, qs)

	up := openaitest.Start(t, "up", "m", "sem", "sem2", "s", "limited")
	bad := openaitest.Start(t, "bad", "broken")
	bad.FailWith(http.StatusInternalServerError)
	throttled := openaitest.Start(t, "throttled", "busy")
	throttled.FailWith(http.StatusTooManyRequests)
	badPrefill := openaitest.Start(t, "badprefill", "pdfail")
	badPrefill.FailWith(http.StatusInternalServerError)
	triton := gatewaytest.Start(t, gateway.Config{})
	fabric := vllmsim.NewFabric()
	prefill := vllmsim.Start(t, vllmsim.Config{Model: "pd", Role: vllmsim.RolePrefill, Fabric: fabric})
	decode := vllmsim.Start(t, vllmsim.Config{Model: "pd", Role: vllmsim.RoleDecode, Fabric: fabric})
	qwen, err := filepath.Abs("../../lib/tokenizer/testdata/qwen3")
	require.NoError(t, err)
	base := startGateway(t, fmt.Sprintf(`
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
  - {name: bad, url: %s, type: vllm, check_interval: 1h}
  - {name: throttled, url: %s, type: vllm, check_interval: 1h}
  - {name: prefill, url: %s, type: vllm, check_interval: 1h}
  - {name: badprefill, url: %s, type: vllm, check_interval: 1h}
  - {name: decode, url: %s, type: vllm, check_interval: 1h, aliases: {pdfail: pd}}
  - {name: triton, url: %s, type: kserve, check_interval: 1h, models: [simple], aliases: {remote_simple: simple}}
models:
  m: {cache: {mode: exact}}
  sem: {cache: {mode: semantic}}
  sem2: {cache: {mode: semantic, embeddings: no-such-model}}
  s: {tokenizer: %s, session: {context_window: 64}}
  pd: {routing: cache_aware, disaggregation: {prefill: [prefill], decode: [decode], min_prompt_tokens: 64}}
  pdfail: {disaggregation: {prefill: [badprefill], decode: [decode], min_prompt_tokens: 64}}
limits:
  models: {limited: {requests_per_minute: 1}}
breaker: {consecutive_failures: 1, error_rate: -1, open_timeout: 1m}
server: {max_decompressed_bytes: 65536}
batch: {dir: %s}
`, up.URL, bad.URL, throttled.URL, prefill.URL, badPrefill.URL, decode.URL, triton.URL, qwen, t.TempDir()))
	c := client{t: t, base: base}
	require.Eventually(t, func() bool {
		return statusOf(c, "GET", "/v1/models/m", "") == http.StatusOK && statusOf(c, "GET", "/v2/models/remote_simple/ready", "") == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "the upstreams' models are routed")

	exercise(t, c, up)

	_, page := c.expect(http.StatusOK, "GET", "/metrics", "")
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(strings.NewReader(page))
	require.NoError(t, err)
	types := map[string]dto.MetricType{}
	for name, f := range families {
		types[name] = f.GetType()
	}
	// The rate limiter's Redis families, which a gateway exposes only with Redis (this one has
	// none): as a Redis limiter registers them.
	rl := ratelimit.NewMetrics()
	_, err = ratelimit.NewRedis(nil, ratelimit.RedisOptions{Metrics: rl})
	require.NoError(t, err)
	rlReg := prometheus.NewRegistry()
	rlReg.MustRegister(rl.Collectors()...)
	rlFamilies, err := rlReg.Gather()
	require.NoError(t, err)
	for _, f := range rlFamilies {
		if strings.Contains(f.GetName(), "_redis_") {
			types[f.GetName()] = f.GetType()
		}
	}

	problems, used := check(qs, types)
	for _, p := range problems {
		t.Error(p)
	}

	// What the gateway exposes and no panel shows: logged, and failed when it is most of it.
	var ours, unshown []string
	for name := range types {
		if strings.HasPrefix(name, "infergate_") || strings.HasPrefix(name, "nv_") {
			ours = append(ours, name)
			if !used[name] {
				unshown = append(unshown, name)
			}
		}
	}
	slices.Sort(unshown)
	list := strings.Join(unshown, ", ")
	if list == "" {
		list = "none"
	}
	t.Logf("the dashboard shows %d of the %d infergate_ and nv_ families the gateway exposed here; not shown: %s",
		len(ours)-len(unshown), len(ours), list)
	assert.LessOrEqual(t, float64(len(unshown)), maxUnshownShare*float64(len(ours)),
		"most of the gateway's metrics have no panel: %s", list)
}

// statusOf is a request's status, 0 when it got none: for polling, and for goroutines, which
// must not stop the test (require) themselves.
func statusOf(c client, method, path, body string) int {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}
