package olla

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream/openaipool"
)

// Info is what the status routes say of the running gateway.
type Info struct {
	// Version and Commit name the build ("dev" and "" when unknown).
	Version, Commit string
	// Started is when the process started, for uptimes.
	Started time.Time
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Translators, when set, returns the translators' counts for /internal/stats/translators (the
	// Anthropic Messages API's).
	Translators func() []TranslatorStats
}

// TranslatorStats are one API translator's counts, as Olla's /internal/stats/translators shows
// them.
type TranslatorStats struct {
	Name                                    string
	Requests, Successes, Failures           int64
	Passthrough, Translated                 int64
	Streaming, NonStreaming                 int64
	LatencyTotal                            time.Duration
	FallbackNoCompatible, FallbackNoSupport int64
}

// MountStatus serves Olla's status routes on mux, from p's pool: /internal/health (liveness, always
// 200), /version, /internal/process, /internal/status, /internal/status/endpoints,
// /internal/status/models, /internal/stats/models, /internal/stats/translators and
// /internal/stats/sticky, in Olla's shapes (its monitoring and its test scripts read them), filled
// from infergate's own state. What Olla reports and infergate does not keep (its security
// counters, its profiles) is reported as Olla reports it with nothing to count.
func MountStatus(mux *http.ServeMux, p *openai.Proxy, info Info) {
	if info.Now == nil {
		info.Now = time.Now
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Started.IsZero() {
		info.Started = info.Now()
	}
	s := &status{p: p, info: info}
	mux.HandleFunc("GET /internal/health", func(w http.ResponseWriter, _ *http.Request) {
		writeCompact(w, http.StatusOK, map[string]string{"status": "healthy"})
	})
	mux.HandleFunc("GET /version", s.version)
	mux.HandleFunc("GET /internal/process", s.process)
	mux.HandleFunc("GET /internal/status", cached(s.overview))
	mux.HandleFunc("GET /internal/status/endpoints", cached(s.endpoints))
	mux.HandleFunc("GET /internal/status/models", cached(s.models))
	mux.HandleFunc("GET /internal/stats/models", s.modelStats)
	mux.HandleFunc("GET /internal/stats/translators", s.translators)
	mux.HandleFunc("GET /internal/stats/sticky", s.sticky)
}

type status struct {
	p    *openai.Proxy
	info Info
}

// writeCompact writes v as compact JSON without a trailing newline: Olla's clients match
// substrings such as "object":"list" in its answers.
func writeCompact(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding the answer failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// cached serves an answer as Olla's status routes do: a weak ETag of the body (a matching
// If-None-Match gets a bare 304), Cache-Control: private, no-cache, and gzip for a client that
// takes it once the body is over 256 bytes.
func cached(build func(r *http.Request) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := json.Marshal(build(r))
		if err != nil {
			http.Error(w, "encoding the answer failed", http.StatusInternalServerError)
			return
		}
		h := fnv.New64a()
		_, _ = h.Write(b)
		tag := `W/"` + strconv.FormatUint(h.Sum64(), 36) + `"`
		hd := w.Header()
		hd.Set("ETag", tag)
		hd.Set("Cache-Control", "private, no-cache")
		hd.Set("Vary", "Accept-Encoding")
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		hd.Set("Content-Type", "application/json")
		if len(b) > 256 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			_, _ = zw.Write(b)
			_ = zw.Close()
			hd.Set("Content-Encoding", "gzip")
			b = z.Bytes()
		}
		_, _ = w.Write(b)
	}
}

func (s *status) version(w http.ResponseWriter, _ *http.Request) {
	type build struct {
		Commit    string `json:"commit"`
		Date      string `json:"date"`
		GoVersion string `json:"go_version"`
		Platform  string `json:"platform"`
	}
	writeCompact(w, http.StatusOK, map[string]any{
		"name":                      "infergate",
		"version":                   s.info.Version,
		"edition":                   "olla-compatible",
		"description":               "infergate, serving Olla's routes",
		"build":                     build{Commit: s.info.Commit, Date: "", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH},
		"capabilities":              []string{"openai", "anthropic", "kserve", "olla-routes", "sticky-sessions"},
		"capabilities_experimental": []string{},
		"supported_backends":        []string{"vllm", "sglang", "llamacpp", "lm-studio", "openai", "ollama"},
		"api": map[string]any{"version": "v1", "endpoints": map[string]string{
			"health": "/internal/health", "metrics": "/metrics", "status": "/internal/status",
			"process": "/internal/process", "version": "/version"}},
		"links": map[string]string{},
	})
}

// process is /internal/process: the runtime's memory, collector and goroutine figures, in Olla's
// human-readable units.
func (s *status) process(w http.ResponseWriter, _ *http.Request) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	goroutines := runtime.NumGoroutine()
	health := "healthy"
	if goroutines > 10000 {
		health = "high"
	}
	pressure := "low"
	if m.Sys > 0 && float64(m.HeapAlloc)/float64(m.Sys) > 0.8 {
		pressure = "high"
	}
	now := s.info.Now()
	lastGC := "never"
	if m.LastGC != 0 {
		lastGC = ago(now.Sub(time.Unix(0, int64(m.LastGC))))
	}
	writeCompact(w, http.StatusOK, map[string]any{
		"timestamp": now.UTC().Format(time.RFC3339),
		"memory": map[string]string{
			"heap_alloc": size(int64(m.HeapAlloc)), "heap_sys": size(int64(m.HeapSys)), "heap_idle": size(int64(m.HeapIdle)),
			"heap_inuse": size(int64(m.HeapInuse)), "heap_released": size(int64(m.HeapReleased)), "stack_inuse": size(int64(m.StackInuse)),
			"sys": size(int64(m.Sys)), "memory_pressure": pressure,
		},
		"garbage_collection": map[string]any{
			"num_gc": m.NumGC, "last_gc": lastGC, "pause_total": time.Duration(m.PauseTotalNs).String(),
			"gc_cpu_fraction": fmt.Sprintf("%.4f%%", m.GCCPUFraction*100),
		},
		"goroutines": map[string]any{"count": goroutines, "health_status": health, "cgo_calls": runtime.NumCgoCall()},
		"runtime": map[string]any{
			"uptime": now.Sub(s.info.Started).Round(time.Second).String(), "go_version": runtime.Version(),
			"num_cpu": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0),
		},
		"allocations": map[string]any{
			"total_alloc": size(int64(m.TotalAlloc)), "mallocs": m.Mallocs, "frees": m.Frees, "live_objects": m.Mallocs - m.Frees,
		},
	})
}

// endpointStatus is Olla's word for an endpoint's state.
func endpointStatus(e openaipool.Endpoint) string {
	if e.Healthy {
		return "healthy"
	}
	return "unhealthy"
}

// issues is Olla's one-word diagnosis of an endpoint, "" when none.
func issues(e openaipool.Endpoint) string {
	switch {
	case !e.Healthy:
		return "unavailable"
	case e.Stats.Requests >= 10 && rate(e.Stats.Successes, e.Stats.Requests) < 0.5:
		return "low success rate"
	case e.Stats.Requests >= 10 && rate(e.Stats.Successes, e.Stats.Requests) < 0.9:
		return "unstable"
	}
	return ""
}

// rate is the share part is of whole requests; 1 before any.
func rate(part, whole int64) float64 {
	if whole == 0 {
		return 1
	}
	return float64(part) / float64(whole)
}

// percent writes a rate as Olla does ("99.6%"); "N/A" with no requests.
func percent(part, whole int64) string {
	if whole == 0 {
		return "N/A"
	}
	return strconv.FormatFloat(math.Round(rate(part, whole)*1000)/10, 'f', -1, 64) + "%"
}

// success is st's success rate as Olla writes it.
func success(st openaipool.Stats) string { return percent(st.Successes, st.Requests) }

func ms(d time.Duration) int64 { return d.Milliseconds() }

// latency writes a duration as Olla does ("120ms").
func latency(d time.Duration) string { return strconv.FormatInt(ms(d), 10) + "ms" }

// mean is total over n requests; 0 before any.
func mean(total time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return total / time.Duration(n)
}

// add sums b's counts into a (not its latency bounds), for a page's totals.
func add(a *openaipool.Stats, b openaipool.Stats) {
	a.Requests += b.Requests
	a.Successes += b.Successes
	a.Failures += b.Failures
	a.LatencyTotal += b.LatencyTotal
	a.Bytes += b.Bytes
}

// size writes a byte count as Olla does ("3.67 KB").
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %cB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ago writes a past duration as Olla does ("13s ago").
func ago(d time.Duration) string { return d.Round(time.Second).String() + " ago" }

// sortedEndpoints orders endpoints as Olla's status pages do: priority, highest first, then the
// healthy ones, then by name.
func sortedEndpoints(eps []openaipool.Endpoint) []openaipool.Endpoint {
	slices.SortStableFunc(eps, func(a, b openaipool.Endpoint) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if a.Healthy != b.Healthy {
			if a.Healthy {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return eps
}

func (s *status) endpoints(*http.Request) any {
	type ep struct {
		ID                string `json:"id"`
		Name              string `json:"name"`
		URL               string `json:"url"`
		Type              string `json:"type"`
		Status            string `json:"status"`
		Priority          int    `json:"priority"`
		ModelCount        int    `json:"model_count"`
		RequestCount      int64  `json:"request_count"`
		SuccessRate       string `json:"success_rate"`
		MinLatencyMS      int64  `json:"min_latency_ms"`
		MaxLatencyMS      int64  `json:"max_latency_ms"`
		AvgLatencyMS      *int64 `json:"avg_latency_ms,omitempty"`
		ActiveConnections int64  `json:"active_connections"`
		HealthCheck       string `json:"health_check"`
		Issues            string `json:"issues,omitempty"`
	}
	eps := sortedEndpoints(s.p.Endpoints())
	out := struct {
		Timestamp    string `json:"timestamp"`
		TotalCount   int    `json:"total_count"`
		HealthyCount int    `json:"healthy_count"`
		Routable     int    `json:"routable_count"`
		Endpoints    []ep   `json:"endpoints"`
	}{Timestamp: s.info.Now().UTC().Format(time.RFC3339), TotalCount: len(eps), Endpoints: []ep{}}
	for _, e := range eps {
		if e.Healthy {
			out.HealthyCount++
			out.Routable++
		}
		v := ep{ID: e.Name, Name: e.Name, URL: e.URL, Type: e.Type, Status: endpointStatus(e), Priority: e.Priority,
			ModelCount: e.Models, RequestCount: e.Stats.Requests, SuccessRate: success(e.Stats),
			MinLatencyMS: ms(e.Stats.LatencyMin), MaxLatencyMS: ms(e.Stats.LatencyMax),
			ActiveConnections: e.Outstanding, HealthCheck: endpointStatus(e), Issues: issues(e)}
		if e.Stats.Requests > 0 {
			avg := ms(e.Stats.AvgLatency())
			v.AvgLatencyMS = &avg
		}
		out.Endpoints = append(out.Endpoints, v)
	}
	return out
}

func (s *status) overview(*http.Request) any {
	type ep struct {
		ID          string         `json:"id"`
		Name        string         `json:"name"`
		URL         string         `json:"url"`
		Status      string         `json:"status"`
		Priority    int            `json:"priority"`
		SuccessRate string         `json:"success_rate"`
		AvgLatency  string         `json:"avg_latency"`
		MinLatency  int64          `json:"min_latency_ms"`
		MaxLatency  int64          `json:"max_latency_ms"`
		Traffic     string         `json:"traffic"`
		Connections int64          `json:"connections"`
		Requests    int64          `json:"requests"`
		Issues      string         `json:"issues"`
		Models      map[string]any `json:"models"`
	}
	now := s.info.Now()
	eps := sortedEndpoints(s.p.Endpoints())
	var total openaipool.Stats
	up, conns := 0, int64(0)
	list := []ep{}
	for _, e := range eps {
		if e.Healthy {
			up++
		}
		conns += e.Outstanding
		add(&total, e.Stats)
		list = append(list, ep{ID: e.Name, Name: e.Name, URL: e.URL, Status: endpointStatus(e), Priority: e.Priority,
			SuccessRate: success(e.Stats), AvgLatency: latency(e.Stats.AvgLatency()),
			MinLatency: ms(e.Stats.LatencyMin), MaxLatency: ms(e.Stats.LatencyMax), Traffic: size(e.Stats.Bytes),
			Connections: e.Outstanding, Requests: e.Stats.Requests, Issues: issues(e),
			Models: map[string]any{"count": e.Models}})
	}
	system := "healthy"
	switch {
	case len(eps) > 0 && up == 0:
		system = "critical"
	case up < len(eps):
		system = "degraded"
	}
	return map[string]any{
		"timestamp": now.UTC().Format(time.RFC3339),
		"proxy":     map[string]string{"engine": "infergate", "profile": "auto", "balancer": "least-connections"},
		"endpoints": list,
		"security":  map[string]any{"status": "normal", "blocked_ips": 0, "violations": map[string]int{"rate_limits": 0, "size_limits": 0}},
		"system": map[string]any{
			"status": system, "endpoints_up": fmt.Sprintf("%d/%d", up, len(eps)), "success_rate": success(total),
			"avg_latency": latency(total.AvgLatency()), "total_traffic": size(total.Bytes),
			"uptime": now.Sub(s.info.Started).Round(time.Second).String(), "start_time": s.info.Started.UTC().Format(time.RFC3339),
			"version": s.info.Version, "commit": s.info.Commit, "active_connections": conns, "security_violations": 0,
			"total_requests": total.Requests, "total_failures": total.Failures, "has_traffic": total.Requests > 0,
		},
	}
}

// models is /internal/status/models. infergate does not read model families from its upstreams, so
// every model is in Olla's "unknown" family bucket.
func (s *status) models(r *http.Request) any {
	type recent struct {
		Name        string   `json:"name"`
		Type        string   `json:"type,omitempty"`
		LastSeen    string   `json:"last_seen"`
		Endpoints   []string `json:"endpoints"`
		EndpointIDs []string `json:"endpoint_ids"`
	}
	routes := s.p.Routes(r.Context())
	names := make([]string, 0, len(routes))
	eps := map[string]bool{}
	var rec []recent
	for _, m := range routes {
		names = append(names, m.Name)
		var serving []string
		typ := ""
		for _, rt := range m.Routes {
			eps[rt.Endpoint] = true
			serving = append(serving, rt.Endpoint)
			if typ == "" {
				typ = rt.Type
			}
		}
		rec = append(rec, recent{Name: m.Name, Type: typ, LastSeen: "0s ago", Endpoints: serving, EndpointIDs: serving})
	}
	if len(rec) > 10 {
		rec = rec[:10]
	}
	if rec == nil {
		rec = []recent{}
	}
	byFamily := map[string][]string{}
	if len(names) > 0 {
		byFamily["unknown"] = names
	}
	return map[string]any{
		"timestamp": s.info.Now().UTC().Format(time.RFC3339), "total_models": len(names), "total_families": len(byFamily),
		"total_endpoints": len(eps), "models_by_family": byFamily, "recent_models": rec,
	}
}

// modelStats is /internal/stats/models: each model's requests since the process started.
func (s *status) modelStats(w http.ResponseWriter, r *http.Request) {
	type model struct {
		Name           string `json:"name"`
		Total          int64  `json:"total_requests"`
		Successful     int64  `json:"successful_requests"`
		Failed         int64  `json:"failed_requests"`
		SuccessRate    string `json:"success_rate"`
		Traffic        string `json:"total_traffic"`
		AverageLatency string `json:"average_latency"`
		LastRequested  string `json:"last_requested"`
	}
	stats := s.p.ModelStats()
	names := make([]string, 0, len(stats))
	for name, st := range stats {
		if st.Requests > 0 && s.p.Visible(r.Context(), name) { // Olla lists the models requested
			names = append(names, name)
		}
	}
	slices.Sort(names)
	now := s.info.Now()
	out := []model{}
	var total openaipool.Stats
	most, least := "", ""
	for _, name := range names {
		st := stats[name]
		last := "never"
		if !st.Last.IsZero() {
			last = ago(now.Sub(st.Last))
		}
		out = append(out, model{Name: strings.ToLower(name), Total: st.Requests, Successful: st.Successes, Failed: st.Failures,
			SuccessRate: success(st), Traffic: size(st.Bytes), AverageLatency: latency(st.AvgLatency()),
			LastRequested: last})
		add(&total, st)
		if most == "" || st.Requests > stats[most].Requests {
			most = name
		}
		if least == "" || st.Requests < stats[least].Requests {
			least = name
		}
	}
	writeCompact(w, http.StatusOK, map[string]any{
		"timestamp": now.UTC().Format(time.RFC3339), "models": out, "endpoints": map[string]any{},
		"summary": map[string]any{"total_models": len(names), "active_models": len(names), "total_requests": total.Requests,
			"overall_success_rate": success(total), "total_traffic": size(total.Bytes),
			"most_popular_model": strings.ToLower(most), "least_popular_model": strings.ToLower(least)},
	})
}

// translators is /internal/stats/translators: the Anthropic Messages API's counts.
func (s *status) translators(w http.ResponseWriter, _ *http.Request) {
	type tr struct {
		Name                  string `json:"translator_name"`
		Total                 int64  `json:"total_requests"`
		Successful            int64  `json:"successful_requests"`
		Failed                int64  `json:"failed_requests"`
		SuccessRate           string `json:"success_rate"`
		Passthrough           int64  `json:"passthrough_requests"`
		Translation           int64  `json:"translation_requests"`
		PassthroughRate       string `json:"passthrough_rate"`
		Streaming             int64  `json:"streaming_requests"`
		NonStreaming          int64  `json:"non_streaming_requests"`
		AverageLatency        string `json:"average_latency"`
		FallbackNoCompatible  int64  `json:"fallback_no_compatible_endpoints"`
		FallbackNoPassthrough int64  `json:"fallback_translator_does_not_support_passthrough"`
		FallbackCannot        int64  `json:"fallback_cannot_passthrough"`
	}
	var all []TranslatorStats
	if s.info.Translators != nil {
		all = s.info.Translators()
	}
	list := []tr{}
	var sum TranslatorStats
	active := 0
	for _, t := range all {
		list = append(list, tr{Name: t.Name, Total: t.Requests, Successful: t.Successes, Failed: t.Failures,
			SuccessRate: percent(t.Successes, t.Requests), Passthrough: t.Passthrough, Translation: t.Translated,
			PassthroughRate: percent(t.Passthrough, t.Requests), Streaming: t.Streaming, NonStreaming: t.NonStreaming,
			AverageLatency:       latency(mean(t.LatencyTotal, t.Requests)),
			FallbackNoCompatible: t.FallbackNoCompatible, FallbackNoPassthrough: t.FallbackNoSupport})
		if t.Requests > 0 {
			active++
		}
		sum.Requests += t.Requests
		sum.Successes += t.Successes
		sum.Passthrough += t.Passthrough
		sum.Translated += t.Translated
		sum.Streaming += t.Streaming
		sum.NonStreaming += t.NonStreaming
	}
	writeCompact(w, http.StatusOK, map[string]any{
		"timestamp": s.info.Now().UTC().Format(time.RFC3339), "translators": list,
		"summary": map[string]any{"total_translators": len(list), "active_translators": active, "total_requests": sum.Requests,
			"overall_success_rate": percent(sum.Successes, sum.Requests),
			"total_passthrough":    sum.Passthrough, "total_translations": sum.Translated,
			"overall_passthrough_rate": percent(sum.Passthrough, sum.Requests),
			"total_streaming":          sum.Streaming, "total_non_streaming": sum.NonStreaming},
	})
}

// sticky is /internal/stats/sticky: the sticky sessions' store (X-Olla-Session-ID pins).
func (s *status) sticky(w http.ResponseWriter, _ *http.Request) {
	st := s.p.StickyStats()
	writeCompact(w, http.StatusOK, map[string]any{
		"enabled": true, "active_sessions": st.Active, "insertions": st.Insertions, "hits": st.Hits, "misses": st.Misses,
		"evictions": st.Evictions, "max_sessions": st.Max, "idle_ttl_seconds": int64(st.IdleTTL / time.Second),
	})
}
