// Package vllmsim is a simulated vLLM server with a prefix cache, on a real loopback socket, so
// that cache-aware routing and prefill/decode disaggregation can be tested and benchmarked
// without GPUs. Where openaitest injects failures, vllmsim models what makes one endpoint a
// better choice than another: what it has cached, how busy it is, and where its KV came from.
//
// What it models:
//   - Anthropic's /v1/messages, whole and streamed, as vLLM 0.12 and later serve it.
//   - OpenAI's /v1/completions and /v1/chat/completions, whole and streamed, with vLLM's usage
//     (prompt_tokens_details.cached_tokens, omitted when 0) and error shape; /v1/models, /health,
//     and /metrics with vLLM's request gauges and prefix-cache counters.
//   - Tokens: a prompt of token ids is used as is; text (a completion's prompt, or a chat's
//     messages rendered as "<role>: <content>\n") becomes one pseudo-token per 4 bytes, so equal
//     text prefixes give equal token prefixes.
//   - The prefix cache: chained hashes of full blocks of BlockSize tokens, in an LRU of
//     CapacityBlocks blocks. A request's cached tokens are its leading cached blocks, at most its
//     prompt less one token, as vLLM's (the last token is always computed).
//   - Cost and load: MaxConcurrent requests run, the rest wait in arrival order; a running
//     request sleeps PrefillPerToken per uncached prompt token, then DecodePerToken per token
//     generated (a stream sends each token as it is generated).
//   - Prefill/decode disaggregation with vLLM's NIXL connector protocol (Role "prefill" or
//     "decode"): a prefill server answers one token and the kv_transfer_params of its KV, which
//     it leaves on a Fabric shared by a test's servers; a decode server given those params pulls
//     the KV instead of prefilling, recomputes on params it cannot use (as vLLM does after
//     "Got invalid KVTransferParams"), and refuses params naming a transfer that is not held.
//   - What a gateway sent: the last request's body and headers, and requests carrying
//     kv_transfer_params or routing headers no correct gateway forwards (Stats.ForeignParams).
//
// What it does not model: real tokenization or text, sampling and stop conditions (every answer
// is max_tokens tokens of " tok", finish_reason "length"), n > 1, batched prompts, logprobs,
// tools, embeddings, batching's effect on step time, preemption, blocks
// pinned by running requests or held transfers (only the LRU bounds the cache), KV-cache usage,
// KV events, multiple KV groups, LoRA, and NIXL's push mode and lease heartbeats.
package vllmsim

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Roles of a server in prefill/decode disaggregation.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Config describes one simulated engine. Zero values take the defaults; a negative duration
// means no cost at all.
type Config struct {
	// Model is the served model name (default "sim"). Requests may name it or no model.
	Model string
	// Role is RolePrefill, RoleDecode, or "" for an aggregated engine (prefill and decode).
	Role string
	// Fabric carries KV transfers between the test's servers; a prefill or decode server needs one.
	Fabric *Fabric
	// EngineID names the engine on the Fabric and in its transfers (default random, as vLLM's).
	EngineID string

	// BlockSize is tokens per KV block (vLLM's default, 16).
	BlockSize int
	// CapacityBlocks bounds the cached blocks (default 4096).
	CapacityBlocks int
	// MaxConcurrent is how many requests run at once (default 4); the rest wait.
	MaxConcurrent int
	// MaxModelLen bounds prompt plus max_tokens (default 131072); a longer request gets vLLM's
	// context-length error. It also bounds what one request costs the simulator.
	MaxModelLen int

	// PrefillPerToken is charged per prompt token not in the cache (default 2µs).
	PrefillPerToken time.Duration
	// DecodePerToken is charged per generated token (default 50µs).
	DecodePerToken time.Duration
	// TransferPerToken is charged per prompt token a decode server pulls instead of prefilling
	// (default 200ns).
	TransferPerToken time.Duration
	// TransferTTL is how long a prefill server holds a transfer no decode server pulled (default
	// 480s, VLLM_NIXL_ABORT_REQUEST_TIMEOUT's).
	TransferTTL time.Duration
}

func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = "sim"
	}
	if c.EngineID == "" {
		c.EngineID = rand.Text()
	}
	defaultInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defaultInt(&c.BlockSize, 16)
	defaultInt(&c.CapacityBlocks, 4096)
	defaultInt(&c.MaxConcurrent, 4)
	defaultInt(&c.MaxModelLen, 131072)
	defaultDuration := func(v *time.Duration, d time.Duration) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	defaultDuration(&c.PrefillPerToken, 2*time.Microsecond)
	defaultDuration(&c.DecodePerToken, 50*time.Microsecond)
	defaultDuration(&c.TransferPerToken, 200*time.Nanosecond)
	defaultDuration(&c.TransferTTL, 480*time.Second)
	return c
}

// Stats are what a server did since it started or was Reset.
type Stats struct {
	Requests     int64 // completion requests received, refused ones included
	PromptTokens int64 // prompt tokens of the requests served
	CachedTokens int64 // of those, found in the prefix cache
	// Recomputed counts decode requests whose kv_transfer_params were invalid (a field missing
	// or malformed): the prompt was prefilled locally, as vLLM does. A gateway that mangles the
	// params passes every output check while paying for two prefills: assert this is 0.
	Recomputed int64
	// LocalPrefills counts decode requests without a remote prefill (no kv_transfer_params, or
	// do_remote_prefill not true): disaggregation bypassed.
	LocalPrefills   int64
	TransfersPulled int64 // decode requests whose KV was pulled from a prefill server
	MaxWaiting      int64 // most requests waiting at once
	// ForeignParams counts requests carrying what no correct gateway forwards to an engine:
	// kv_transfer_params sent to an aggregated engine, params naming a KV source (engine id,
	// remote_host, remote_port) that is not a prefill engine on the Fabric, or the routing
	// headers of disaggregating proxies (X-Prefiller-Host-Port and kin).
	ForeignParams int64
}

// HitRate is the share of prompt tokens found in the prefix cache.
func (s Stats) HitRate() float64 {
	if s.PromptTokens == 0 {
		return 0
	}
	return float64(s.CachedTokens) / float64(s.PromptTokens)
}

// Server is a simulated engine. Its methods are safe for concurrent use.
type Server struct {
	// URL is http://127.0.0.1:port, without /v1 (set by Start).
	URL string

	cfg        Config
	mux        *http.ServeMux
	host       string // the side channel's address, named in prefill answers
	port       int
	sched      scheduler
	seq        atomic.Int64 // request ids
	labelModel string       // cfg.Model escaped for a Prometheus label

	mu         sync.Mutex
	cache      *prefixCache
	stats      Stats
	queries    int64 // prefix-cache counters of /metrics: monotonic, untouched by Reset
	hits       int64
	lastBody   []byte
	lastHeader http.Header
}

// New is a server for cfg, not yet listening: Handler serves it. Its prefill answers name
// localhost:5600 (vLLM's default side channel) as the KV source until Start gives it an address.
// New panics on a Config no test means to write: an unknown Role, a prefill or decode server
// without a Fabric, or an EngineID already on the Fabric.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Role != "" && cfg.Role != RolePrefill && cfg.Role != RoleDecode:
		panic(fmt.Sprintf("vllmsim: Role %q is none of %q, %q and \"\"", cfg.Role, RolePrefill, RoleDecode))
	case cfg.Role != "" && cfg.Fabric == nil:
		panic(fmt.Sprintf("vllmsim: a %s server needs a Fabric (NewFabric)", cfg.Role))
	}
	s := &Server{
		cfg: cfg, host: "localhost", port: 5600,
		sched:      scheduler{limit: cfg.MaxConcurrent},
		cache:      newPrefixCache(cfg.CapacityBlocks),
		labelModel: labelEscaper.Replace(cfg.Model),
		mux:        http.NewServeMux(),
	}
	if cfg.Fabric != nil {
		cfg.Fabric.join(cfg.EngineID, s.host, s.port)
	}
	s.mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	s.mux.HandleFunc("POST /v1/messages", s.messages)
	return s
}

// Start serves New(cfg) on 127.0.0.1 until tb ends. Its prefill answers name that address as
// the KV source.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s := New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	s.URL = "http://" + addr.String()
	s.host, s.port = addr.IP.String(), addr.Port
	if s.cfg.Fabric != nil {
		s.cfg.Fabric.move(s.cfg.EngineID, s.host, s.port)
	}
	srv := &http.Server{Handler: s.mux}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return s
}

// Handler serves the engine's routes.
func (s *Server) Handler() http.Handler { return s.mux }

// EngineID is the engine's id on its Fabric (remote_engine_id in its transfers).
func (s *Server) EngineID() string { return s.cfg.EngineID }

// Stats are the server's counts since it started or was Reset.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	s.sched.mu.Lock()
	st.MaxWaiting = int64(s.sched.maxWaiting)
	s.sched.mu.Unlock()
	return st
}

// Reset zeroes Stats and forgets the last request, for a test's or benchmark's next phase. The
// prefix cache is kept (a warmed cache is often the point) and so are /metrics' counters, which
// are monotonic as Prometheus counters must be.
func (s *Server) Reset() {
	s.mu.Lock()
	s.stats = Stats{}
	s.lastBody, s.lastHeader = nil, nil
	s.mu.Unlock()
	s.sched.mu.Lock()
	s.sched.maxWaiting = len(s.sched.queue)
	s.sched.mu.Unlock()
}

// LastRequest is the body and headers of the last completion request received (nil before
// any), for tests to check what a gateway sent.
func (s *Server) LastRequest() (body []byte, header http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.lastBody...), s.lastHeader.Clone()
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.cfg.Model, "object": "model", "created": time.Now().Unix(), "owned_by": "vllm",
		"root": s.cfg.Model, "parent": nil, "max_model_len": s.cfg.MaxModelLen,
	}}})
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// metrics is vLLM's /metrics, reduced to what routers scrape: load and prefix-cache counters
// (llm-d's queue scorer, GIE's auto-tuning from cache_config_info).
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	running, waiting := s.sched.load()
	s.mu.Lock()
	queries, hits := s.queries, s.hits
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := s.labelModel
	fmt.Fprintf(w, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="%[1]s"} %[2]d
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="%[1]s"} %[3]d
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="%[1]s"} %[4]d
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="%[1]s"} %[5]d
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="%[6]d",model_name="%[1]s",num_gpu_blocks="%[7]d"} 1
`, m, running, waiting, queries, hits, s.cfg.BlockSize, s.cfg.CapacityBlocks)
}
