package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/inflate"
	"github.com/infergate/infergate/upstream"
	"go.yaml.in/yaml/v3"
)

// Config is the YAML file -config names. Unknown keys are errors, so a typo does not silently
// turn a feature off. Every scalar setting outside the upstreams list can also be set from the
// environment (see applyEnv), which wins over the file.
type Config struct {
	// BuiltinModels serves Triton's example models (simple, repeat_int32, ...); default true.
	BuiltinModels *bool `yaml:"builtin_models"`
	// DenseModels serves dense networks (stacks of fully connected layers) from safetensors
	// files, keyed by model name: on the CPU, or on a GPU in a binary built with -tags cuda.
	DenseModels map[string]denseModelConfig `yaml:"dense_models"`
	// GPU bounds the CUDA engine's memory pools (a binary built with -tags cuda).
	GPU gpuConfig `yaml:"gpu"`
	// Upstreams are the servers behind the gateway: vLLM, OpenAI and Ollama behind the OpenAI API
	// (and, through the bridge, the KServe surface), Triton/KServe servers behind the KServe surface.
	Upstreams []upstream.Endpoint `yaml:"upstreams"`
	// UpstreamClient is what proxied requests to http:// upstreams go through: fast (the default,
	// the gateway's own HTTP/1.1 client) or std (net/http's Transport, as https:// upstreams use).
	UpstreamClient string `yaml:"upstream_client"`
	// Models holds each LLM's settings, keyed by the public model name clients send (the
	// name an upstream serves it under, or an alias): its tokenizer, context length, ...
	Models map[string]modelConfig `yaml:"models"`
	// Redis, when its address is set, shares state between gateway replicas.
	Redis redisConfig `yaml:"redis"`
	// Registry is the RegistryService where backends register themselves.
	Registry registryConfig `yaml:"registry"`
	// Auth requires API keys; with none configured every caller is let in.
	Auth authConfig `yaml:"auth"`
	// Limits are rate limits per API key, model and route.
	Limits limitsConfig `yaml:"limits"`
	// Shedding bounds the requests in flight.
	Shedding guard.ShedderConfig `yaml:"shedding"`
	// Breaker cuts off failing upstream endpoints.
	Breaker breakerConfig `yaml:"breaker"`
	// Batch is the Files and Batches API and its workers.
	Batch batchConfig `yaml:"batch"`
	// Server bounds what one connection and one request may cost the gateway.
	Server serverConfig `yaml:"server"`
	// Compat holds what makes infergate a drop-in for other gateways' clients.
	Compat compatConfig `yaml:"compat"`
	// Tracing exports spans of inference requests over OTLP, as Triton's trace settings decide.
	Tracing tracingConfig `yaml:"tracing"`

	// source names where the config came from (the file's path), for the console.
	source string
}

// tracingConfig: OpenTelemetry export and Triton's trace settings at start (changed at run time
// with TraceSetting and /v2/trace/setting).
type tracingConfig struct {
	// OTLPEndpoint is the OTLP/HTTP collector's URL (http://collector:4318); empty: nothing is
	// exported and no request is traced, whatever the settings say.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Headers go with every export (a collector's API key).
	Headers map[string]string `yaml:"headers"`
	// ServiceName is the spans' service.name; default infergate.
	ServiceName string `yaml:"service_name"`
	// Level is Triton's trace_level: OFF (the default), TIMESTAMPS or TENSORS.
	Level []string `yaml:"level"`
	// Rate traces one request in Rate; default 1000, as Triton.
	Rate *int `yaml:"rate"`
	// Count is how many requests may be traced; default -1, no limit.
	Count *int `yaml:"count"`
}

// settings are the trace settings at start.
func (c tracingConfig) settings() (tracing.Settings, error) {
	s := tracing.DefaultSettings
	if len(c.Level) > 0 {
		l, err := tracing.ParseLevel(c.Level)
		if err != nil {
			return s, fmt.Errorf("tracing.level: %w", err)
		}
		s.Level = l
	}
	if c.Rate != nil {
		if *c.Rate < 0 || *c.Rate > math.MaxUint32 {
			return s, fmt.Errorf("tracing.rate: %d is not a count of requests", *c.Rate)
		}
		s.Rate = uint32(*c.Rate)
	}
	if c.Count != nil {
		if *c.Count < -1 || *c.Count > math.MaxInt32 {
			return s, fmt.Errorf("tracing.count: %d is neither -1 (no limit) nor a count", *c.Count)
		}
		s.Count = int32(*c.Count)
	}
	return s, nil
}

// compatConfig: other gateways' routes and headers.
type compatConfig struct {
	// OllaRoutes serves Olla's routes (/olla/{provider}/..., /olla/proxy/..., /olla/models,
	// /olla/anthropic/...) beside infergate's own; default true (an unused route costs nothing).
	OllaRoutes *bool `yaml:"olla_routes"`
	// OllaHeaders adds Olla's X-Olla-* response headers beside X-Infergate-*; default false.
	OllaHeaders bool `yaml:"olla_headers"`
}

func (c compatConfig) ollaRoutes() bool { return c.OllaRoutes == nil || *c.OllaRoutes }

// modelConfig is one entry of models: what the gateway knows of an LLM beyond its upstreams.
type modelConfig struct {
	// Tokenizer is a local directory holding the model's Hugging Face tokenizer.json and
	// tokenizer_config.json (optionally generation_config.json, chat_template.jinja; each may be
	// gzipped). Read at start-up, never downloaded. It makes the gateway count prompt tokens,
	// render the chat template, and serve /tokenize and /detokenize for the model.
	Tokenizer string `yaml:"tokenizer"`
	// MaxModelLen is the model's context length in tokens: a request whose prompt plus
	// max_tokens exceeds it is refused with OpenAI's 400 context_length_exceeded before any
	// upstream is asked. 0: no check. Needs tokenizer.
	MaxModelLen int `yaml:"max_model_len"`
	// SpecialTokensInContent reads special-token text in message contents ("<|im_end|>") as the
	// token, as vLLM does; by default it is plain text, so a user cannot forge a role boundary.
	SpecialTokensInContent bool `yaml:"special_tokens_in_content"`
	// Input is what the model's upstreams take: text (the default; requests pass on as sent) or
	// tokens (the gateway renders and tokenizes chat requests and sends the ids to the
	// upstream's /v1/completions, turning the answer back into a chat completion). tokens needs
	// tokenizer.
	Input string `yaml:"input"`
	// Routing picks the endpoint of each request: least_outstanding (the default),
	// round_robin, or cache_aware (the endpoint most likely to hold the prompt's prefix in its
	// KV cache, from the prompt blocks the gateway sent each endpoint; token blocks with a
	// tokenizer, text blocks without).
	Routing string `yaml:"routing"`
	// KVBlockSize is the engines' KV block size in tokens, for cache_aware (default 16, vLLM's).
	KVBlockSize int `yaml:"kv_block_size"`
	// KVCacheBlocks bounds the blocks cache_aware remembers per endpoint (default 32768).
	KVCacheBlocks int `yaml:"kv_cache_blocks"`
	// Disaggregation serves the model in two steps with vLLM's prefill/decode protocol: a
	// prefill endpoint computes the prompt's KV cache, a decode endpoint pulls it and generates.
	Disaggregation *disaggConfig `yaml:"disaggregation"`
	// Cache answers repeated (exact) or near-repeated (semantic) requests from stored answers.
	Cache *cacheConfig `yaml:"cache"`
	// Session keeps conversations in the gateway: clients send only the new turn.
	Session *sessionConfig `yaml:"session"`
	// Messages is how Anthropic Messages API requests (/v1/messages) for the model are served:
	// translate (the default: to OpenAI chat completions and back, for any upstream) or native
	// (passed unchanged to the upstream's own /v1/messages: vLLM 0.12 and later).
	Messages string `yaml:"messages"`
	// Responses is how OpenAI Responses API requests (/v1/responses) for the model are served:
	// auto (the default: passed to the upstreams' own /v1/responses, and translated for each
	// endpoint that answers there with a bare 404), native (always passed) or translate (always
	// served as chat completions). The gateway keeps stored responses in both ways.
	Responses string `yaml:"responses"`
	// Processor serves the model's chat completions through a Granite processor by its
	// registry name or alias (granite3.2, granite3.3, ibm-granite/granite-3.3-8b-instruct, ...):
	// the gateway renders the prompt (thinking, documents, controls, tools) and parses the
	// model's text back into reasoning, citations, hallucinations and tool calls.
	Processor string `yaml:"processor"`
	// Voting answers each chat completion by majority vote over samples completions of the
	// processor (granite-io's voting IO processor): the most common answer, normalized, with
	// its vote count. Needs processor.
	Voting *votingConfig `yaml:"voting"`
}

// votingConfig is models.<name>.voting.
type votingConfig struct {
	// Samples is how many completions each answer is voted over (2 to granite.MaxSamples).
	Samples int `yaml:"samples"`
	// Normalizer makes answers comparable: exact (the default: the parsed content as it is) or
	// integer (each answer read as an integer, as granite-io's integer_normalizer; anything
	// else counts as "nan").
	Normalizer string `yaml:"normalizer"`
}

// normalizer is the voting's answer normalizer (nil: exact).
func (v votingConfig) normalizer() granite.Normalizer {
	if v.Normalizer == "integer" {
		return granite.IntegerNormalizer
	}
	return nil
}

// cacheConfig is models.<name>.cache.
type cacheConfig struct {
	// Mode is exact (the default: the normalized request must match) or semantic (also a
	// stored answer to a similar last user message, in the same conversation context).
	Mode string `yaml:"mode"`
	// Threshold is the cosine similarity a semantic match needs (default 0.95).
	Threshold float64 `yaml:"threshold"`
	// TTL is how long an answer is served (default 1h).
	TTL time.Duration `yaml:"ttl"`
	// MaxEntries and MaxBytes bound the in-process store (defaults 10000 and 64 MiB); the
	// least recently used entries go first.
	MaxEntries int `yaml:"max_entries"`
	MaxBytes   int `yaml:"max_bytes"`
	// Embeddings names the model (one the gateway routes, serving /v1/embeddings) that embeds
	// semantic mode's messages; empty: the built-in lexical embedder.
	Embeddings string `yaml:"embeddings"`
	// Scope is key (the default: each API key has its own entries) or shared.
	Scope string `yaml:"scope"`
	// Sampling is zero (the default: only requests with temperature 0 are cached) or any.
	Sampling string `yaml:"sampling"`
	// ToolCalls stores answers that call tools (off by default: a tool call usually acts on
	// the world, and its result differs from one call to the next).
	ToolCalls bool `yaml:"tool_calls"`
}

// sessionConfig is models.<name>.session.
type sessionConfig struct {
	// ContextWindow, in tokens, trims a session's oldest turns so prompt + max_tokens fits;
	// 0: no trimming (max_bytes still bounds the history).
	ContextWindow int `yaml:"context_window"`
	// TTL is how long an idle session is kept (default 1h); each turn renews it.
	TTL time.Duration `yaml:"ttl"`
	// MaxBytes bounds a session's stored messages (default 1 MiB); the oldest turns go first.
	MaxBytes int `yaml:"max_bytes"`
}

func (c *cacheConfig) validate(name string) []string {
	if c == nil {
		return nil
	}
	key := "models." + name + ".cache"
	var out []string
	switch c.Mode {
	case "", "exact", "semantic":
	default:
		out = append(out, fmt.Sprintf("%s.mode: %q is neither exact nor semantic", key, c.Mode))
	}
	if c.Threshold < 0 || c.Threshold > 1 {
		out = append(out, fmt.Sprintf("%s.threshold: %g is not a cosine similarity between 0 and 1", key, c.Threshold))
	}
	if c.TTL < 0 || c.MaxEntries < 0 || c.MaxBytes < 0 {
		out = append(out, fmt.Sprintf("%s: ttl, max_entries and max_bytes cannot be negative", key))
	}
	switch c.Scope {
	case "", "key", "shared":
	default:
		out = append(out, fmt.Sprintf("%s.scope: %q is neither key nor shared", key, c.Scope))
	}
	switch c.Sampling {
	case "", "zero", "any":
	default:
		out = append(out, fmt.Sprintf("%s.sampling: %q is neither zero nor any", key, c.Sampling))
	}
	if c.Mode != "semantic" && (c.Embeddings != "" || c.Threshold != 0) {
		out = append(out, fmt.Sprintf("%s: embeddings and threshold are for mode: semantic", key))
	}
	if c.Embeddings == name {
		out = append(out, fmt.Sprintf("%s.embeddings: %q is the cached model itself", key, name))
	}
	return out
}

func (c *sessionConfig) validate(name string) []string {
	if c == nil {
		return nil
	}
	if c.ContextWindow < 0 || c.TTL < 0 || c.MaxBytes < 0 {
		return []string{fmt.Sprintf("models.%s.session: context_window, ttl and max_bytes cannot be negative", name)}
	}
	return nil
}

// disaggConfig is models.<name>.disaggregation.
type disaggConfig struct {
	// Prefill and Decode name the upstreams of each pool (disjoint, each at least one).
	Prefill []string `yaml:"prefill"`
	Decode  []string `yaml:"decode"`
	// MinPromptTokens: shorter prompts go straight to a decode endpoint, which prefills them
	// itself (counted with the model's tokenizer, else estimated at 4 bytes a token).
	MinPromptTokens int `yaml:"min_prompt_tokens"`
	// MaxPrefillQueue: with this many prefill legs in flight, new requests are decoded locally
	// (0: no limit).
	MaxPrefillQueue int `yaml:"max_prefill_queue"`
	// OnPrefillFailure, when no prefill endpoint gives transfer params: fallback (decode
	// locally, the default) or fail (502).
	OnPrefillFailure string `yaml:"on_prefill_failure"`
}

// validateDisagg lists what is wrong with model name's disaggregation, given the upstreams.
func (m modelConfig) validateDisagg(name string, ups []upstream.Endpoint) []string {
	d := m.Disaggregation
	if d == nil {
		return nil
	}
	key := "models." + name + ".disaggregation"
	var out []string
	byName := map[string]upstream.Endpoint{}
	for _, u := range ups {
		byName[u.Name] = u
	}
	seen := map[string]string{}
	for _, pool := range []struct {
		name  string
		names []string
	}{{"prefill", d.Prefill}, {"decode", d.Decode}} {
		if len(pool.names) == 0 {
			out = append(out, fmt.Sprintf("%s.%s: the pool is empty: name at least one upstream", key, pool.name))
		}
		for _, n := range pool.names {
			u, ok := byName[n]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s.%s: %q is not one of the upstreams", key, pool.name, n))
			case u.Type == upstream.TypeKServe:
				out = append(out, fmt.Sprintf("%s.%s: %q is a kserve upstream: disaggregation speaks vLLM's OpenAI API", key, pool.name, n))
			case u.Kind == upstream.KindEmbeddings:
				out = append(out, fmt.Sprintf("%s.%s: %q serves embeddings, which have no decode to disaggregate", key, pool.name, n))
			}
			if other, dup := seen[n]; dup {
				out = append(out, fmt.Sprintf("%s: %q is in both the %s and the %s pool", key, n, other, pool.name))
			}
			seen[n] = pool.name
		}
	}
	if d.MinPromptTokens < 0 || d.MaxPrefillQueue < 0 {
		out = append(out, fmt.Sprintf("%s: min_prompt_tokens and max_prefill_queue cannot be negative", key))
	}
	switch d.OnPrefillFailure {
	case "", "fallback", "fail":
	default:
		out = append(out, fmt.Sprintf("%s.on_prefill_failure: %q is neither fallback nor fail", key, d.OnPrefillFailure))
	}
	return out
}

// validate lists what is wrong with the entry of model name.
func (m modelConfig) validate(name string) []string {
	var out []string
	if m.MaxModelLen < 0 {
		out = append(out, fmt.Sprintf("models.%s.max_model_len: %d is negative", name, m.MaxModelLen))
	}
	switch m.Input {
	case "", "text", "tokens":
	default:
		out = append(out, fmt.Sprintf("models.%s.input: %q is neither text nor tokens", name, m.Input))
	}
	switch m.Routing {
	case "", "least_outstanding", "round_robin", "cache_aware":
	default:
		out = append(out, fmt.Sprintf("models.%s.routing: %q is none of least_outstanding, round_robin, cache_aware", name, m.Routing))
	}
	if m.KVBlockSize < 0 || m.KVCacheBlocks < 0 {
		out = append(out, fmt.Sprintf("models.%s: kv_block_size and kv_cache_blocks cannot be negative", name))
	}
	if m.Tokenizer == "" && (m.MaxModelLen > 0 || m.SpecialTokensInContent || m.Input == "tokens") {
		out = append(out, fmt.Sprintf("models.%s: max_model_len, special_tokens_in_content and input: tokens need tokenizer (the gateway counts tokens with it)", name))
	}
	if m.Processor != "" {
		reg := granite.NewDefaultRegistry()
		if _, ok := reg.Lookup(m.Processor); !ok {
			out = append(out, fmt.Sprintf("models.%s.processor: unknown processor %q (known: %s)", name, m.Processor,
				strings.Join(reg.Names(), ", ")))
		}
		if v := m.Voting; v != nil {
			if v.Samples < 2 || v.Samples > granite.MaxSamples {
				out = append(out, fmt.Sprintf("models.%s.voting.samples: %d is not between 2 and %d", name, v.Samples, granite.MaxSamples))
			}
			if v.Normalizer != "" && v.Normalizer != "exact" && v.Normalizer != "integer" {
				out = append(out, fmt.Sprintf("models.%s.voting.normalizer: %q is neither exact nor integer", name, v.Normalizer))
			}
		}
		if m.Input == "tokens" {
			out = append(out, fmt.Sprintf("models.%s: processor and input: tokens cannot go together (both turn chat into completions; a processor sends its own prompt text)", name))
		}
	}
	if m.Processor == "" && m.Voting != nil {
		out = append(out, fmt.Sprintf("models.%s.voting needs processor (it votes over the processor's parsed answers)", name))
	}
	switch m.Messages {
	case "", "translate", "native":
	default:
		out = append(out, fmt.Sprintf("models.%s.messages: %q is neither translate nor native", name, m.Messages))
	}
	switch m.Responses {
	case "", "auto", "translate", "native":
	default:
		out = append(out, fmt.Sprintf("models.%s.responses: %q is none of auto, translate and native", name, m.Responses))
	}
	out = append(out, m.Cache.validate(name)...)
	out = append(out, m.Session.validate(name)...)
	return out
}

// serverConfig bounds what clients may make the gateway spend before a request reaches a model.
type serverConfig struct {
	// MaxDecompressedBytes is the most one compressed request (or streamed message) may inflate
	// to, on every surface; default 64 MiB. Uncompressed requests keep -max-message-bytes.
	MaxDecompressedBytes int `yaml:"max_decompressed_bytes"`
	// MaxDecompressionRatio is the most a compressed request may inflate per compressed byte once
	// past its first MiB; default 200 (Apache's); -1 turns it off.
	MaxDecompressionRatio int `yaml:"max_decompression_ratio"`
	// MaxDecompressionInFlightBytes bounds the inflated bytes of all requests together; default
	// 1 GiB. Past it a compressed request is refused (413 / RESOURCE_EXHAUSTED) until others end.
	MaxDecompressionInFlightBytes int `yaml:"max_decompression_in_flight_bytes"`
	// FirstByteTimeout closes a new connection that has not begun its first request in time;
	// default 10s.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"`
	// HeaderTimeout bounds the time an HTTP/1.1 request's header may take to arrive (a client
	// trickling it is cut off); default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// IdleTimeout closes a connection that carried nothing for that long (between HTTP/1.1
	// requests, up to a sixteenth longer); default 5m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// HTTP1 is the server of plain HTTP/1.x connections: "gateway" (the default: the gateway's
	// own connection loop) or "net/http" (Go's server, as before).
	HTTP1 string `yaml:"http1"`
	// SystemSharedMemory serves Triton's system shared memory extension (Linux); default true.
	// Clients register /dev/shm objects by key and pass tensors through them: a same-host trust
	// model (README: Security model).
	SystemSharedMemory *bool `yaml:"system_shared_memory"`
	// SharedMemoryMaxRegions caps the regions registered at once; default 4096.
	SharedMemoryMaxRegions int `yaml:"shared_memory_max_regions"`
	// DynamicBatching batches concurrent requests of models whose config has dynamic_batching,
	// as Triton's dynamic batcher does (built-in models, or any switched on at load time with a
	// config override); default true.
	DynamicBatching *bool `yaml:"dynamic_batching"`
	// DynamicBatchingRemote batches registered backends' and KServe upstreams' models too, when
	// their config has dynamic_batching; default false (their servers may batch themselves).
	DynamicBatchingRemote bool `yaml:"dynamic_batching_remote"`
	// Console serves the operator console (GET /console and its JSON API, docs/console.md);
	// default true. With API keys on it needs an admin key.
	Console *bool `yaml:"console"`
	// ConsoleListen serves the console on this address (host:port) instead of the main
	// listener, which then does not serve it.
	ConsoleListen string `yaml:"console_listen"`
	// MaxSpoolBytes caps what the multipart forms of the audio routes hold at once while they
	// are received and sent (their first MiB each in memory, the rest in temporary files);
	// default 2 GiB. A form past it is refused with a 503 and Retry-After.
	MaxSpoolBytes int64 `yaml:"max_spool_bytes"`
	// SpoolDir is where those temporary files are made (unlinked at once); default $TMPDIR.
	SpoolDir string `yaml:"spool_dir"`
}

func (c serverConfig) console() bool { return c.Console == nil || *c.Console }

func (c serverConfig) decompression() inflate.Config {
	return inflate.Config{MaxBytes: int64(c.MaxDecompressedBytes), MaxRatio: int64(c.MaxDecompressionRatio),
		MaxInFlightBytes: int64(c.MaxDecompressionInFlightBytes)}
}

type authConfig struct {
	// Keys are API keys, kept as SHA-256 hashes.
	Keys []guard.KeyConfig `yaml:"keys"`
	// RedisKeys also accepts the keys stored in Redis (<redis.prefix>:{keys}); needs redis.addr.
	RedisKeys bool `yaml:"redis_keys"`
}

type limitsConfig struct {
	guard.Limits `yaml:",inline"`
	// Failure is what happens while Redis cannot be reached: open (decide with a local bucket,
	// the default) or closed (refuse with 503).
	Failure string `yaml:"failure"`
	// RedisTimeout bounds one decision's Redis call; default 50 ms.
	RedisTimeout time.Duration `yaml:"redis_timeout"`
}

type breakerConfig struct {
	// Disabled turns circuit breaking off.
	Disabled         bool `yaml:"disabled"`
	breaker.Settings `yaml:",inline"`
}

// limited reports whether any rate limit is configured.
func (c *limitsConfig) limited() bool {
	nonzero := func(b guard.Budget) bool { return b.RequestsPerMinute > 0 || b.TokensPerMinute > 0 }
	if nonzero(c.PerKey) || nonzero(c.PerModel) {
		return true
	}
	for _, m := range []map[string]guard.Budget{c.Keys, c.Models, c.Routes} {
		for _, b := range m {
			if nonzero(b) {
				return true
			}
		}
	}
	return false
}

type redisConfig struct {
	// Addr is host:port of the Redis server; empty means no Redis (in-process state only).
	Addr     string `yaml:"addr"`
	Username string `yaml:"username"`
	// Password is best given as INFERGATE_REDIS_PASSWORD rather than written in the file.
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`
	// Prefix starts every key and channel, so several gateways can share one Redis; default
	// "infergate".
	Prefix string `yaml:"prefix"`
	// DialTimeout bounds connecting to Redis at start-up; default 5 s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
}

type registryConfig struct {
	// Disabled turns the RegistryService off.
	Disabled bool `yaml:"disabled"`
	// Store is memory (this process only) or redis (every replica sharing the Redis); default
	// redis when redis.addr is set, else memory.
	Store string `yaml:"store"`
	// DefaultTTL, MinTTL and MaxTTL are the lease bounds; defaults 10 s, 1 s and 5 min.
	DefaultTTL time.Duration `yaml:"default_ttl"`
	MinTTL     time.Duration `yaml:"min_ttl"`
	MaxTTL     time.Duration `yaml:"max_ttl"`
}

// denseModelConfig is one dense network: its file and how Triton's instance_group places it.
type denseModelConfig struct {
	// Path is the safetensors file: <layer>.weight [out, in] and <layer>.bias [out] in F32
	// (engines/dense).
	Path string `yaml:"path"`
	// MaxBatchSize is the most rows a request may hold; default 64.
	MaxBatchSize int32 `yaml:"max_batch_size"`
	// Kind is KIND_CPU (the default) or KIND_GPU; Count the instances (default 1); GPUs the GPU
	// they run on (default [0]).
	Kind  string  `yaml:"kind"`
	Count int32   `yaml:"count"`
	GPUs  []int32 `yaml:"gpus"`
}

// gpuConfig bounds the GPU engine's pools on each GPU.
type gpuConfig struct {
	// MaxDeviceBytes caps the device memory held for requests' tensors (weights apart);
	// default 1 GiB.
	MaxDeviceBytes int64 `yaml:"max_device_bytes"`
	// MaxPinnedBytes caps the pinned host memory held for copies to and from the GPU; default
	// 256 MiB.
	MaxPinnedBytes int64 `yaml:"max_pinned_bytes"`
}

// builtins reports whether the built-in models are served.
func (c *Config) builtins() bool { return c.BuiltinModels == nil || *c.BuiltinModels }

// registryStore is the store the registry uses, defaults applied.
func (c *Config) registryStore() string {
	if c.Registry.Store != "" {
		return c.Registry.Store
	}
	if c.Redis.Addr != "" {
		return "redis"
	}
	return "memory"
}

func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes, overrides from the environment and validates one config document; every
// error names the file, and validation errors the endpoint and field too, one per line.
func ParseConfig(name string, data []byte) (*Config, error) {
	c := Config{source: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := applyEnv(&c, os.LookupEnv); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var lines []string
	if err := upstream.Validate(c.Upstreams); err != nil {
		for _, e := range unjoin(err) {
			lines = append(lines, fmt.Sprintf("%s: upstreams: %v", name, e))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.DenseModels)) {
		d := c.DenseModels[m]
		if d.Path == "" {
			lines = append(lines, fmt.Sprintf("%s: dense_models.%s.path: the safetensors file is required", name, m))
		}
		switch d.Kind {
		case "", "KIND_CPU", "KIND_GPU":
		default:
			lines = append(lines, fmt.Sprintf("%s: dense_models.%s.kind: %q is not one of KIND_CPU, KIND_GPU", name, m, d.Kind))
		}
		if d.MaxBatchSize < 0 || d.MaxBatchSize > engines.MaxOverrideBatchSize || d.Count < 0 || d.Count > 1024 {
			lines = append(lines, fmt.Sprintf("%s: dense_models.%s: max_batch_size must be 0 to %d and count 0 to 1024", name, m, engines.MaxOverrideBatchSize))
		}
		if len(d.GPUs) > 0 && d.Kind != "KIND_GPU" {
			lines = append(lines, fmt.Sprintf("%s: dense_models.%s.gpus: needs kind: KIND_GPU", name, m))
		}
	}
	switch c.UpstreamClient {
	case "", "fast", "std":
	default:
		lines = append(lines, fmt.Sprintf("%s: upstream_client: %q is not one of fast, std", name, c.UpstreamClient))
	}
	switch s := c.Registry.Store; s {
	case "", "memory":
	case "redis":
		if c.Redis.Addr == "" {
			lines = append(lines, fmt.Sprintf("%s: registry.store: redis needs redis.addr", name))
		}
	default:
		lines = append(lines, fmt.Sprintf("%s: registry.store: %q is not one of memory, redis", name, s))
	}
	if _, err := c.Tracing.settings(); err != nil {
		lines = append(lines, fmt.Sprintf("%s: %v", name, err))
	}
	if _, err := guard.NewStaticKeys(c.Auth.Keys); err != nil {
		for _, e := range unjoin(err) {
			lines = append(lines, fmt.Sprintf("%s: auth.%v", name, e))
		}
	}
	if c.Auth.RedisKeys && c.Redis.Addr == "" {
		lines = append(lines, fmt.Sprintf("%s: auth.redis_keys needs redis.addr", name))
	}
	for _, ep := range c.Upstreams {
		if !ep.ForwardClientAuth {
			continue
		}
		if len(c.Auth.Keys) > 0 || c.Auth.RedisKeys {
			// With keys on, the client's Authorization (or x-api-key) is the gateway's key:
			// passing it on would hand every upstream the gateway's secrets.
			lines = append(lines, fmt.Sprintf("%s: upstreams: endpoint %q: forward_client_auth: cannot be used with API keys (auth.keys, auth.redis_keys): the client's credential is the gateway's key; give the upstream its own in headers", name, ep.Name))
			continue
		}
		// Such an upstream checks each client's own credential; without API keys the response
		// cache cannot tell clients apart, so a cached answer would reach a client whose
		// credential the upstream never saw (or refused).
		for _, m := range slices.Sorted(maps.Keys(c.Models)) {
			if c.Models[m].Cache != nil && mayServe(ep, m) {
				lines = append(lines, fmt.Sprintf("%s: models.%s.cache: cannot be used with endpoint %q's forward_client_auth (without API keys the cache cannot tell clients apart, and would answer a client whose credential the upstream never checked); limit the endpoint with models: or drop one of the two", name, m, ep.Name))
			}
		}
	}
	if err := c.Limits.Validate(); err != nil {
		for _, e := range unjoin(err) {
			lines = append(lines, fmt.Sprintf("%s: limits.%v", name, e))
		}
	}
	switch c.Limits.Failure {
	case "", "open", "closed":
	default:
		lines = append(lines, fmt.Sprintf("%s: limits.failure: %q is not one of open, closed", name, c.Limits.Failure))
	}
	for _, l := range c.Batch.validate("", c.Redis.Addr) {
		lines = append(lines, fmt.Sprintf("%s: %s", name, l))
	}
	if err := c.Server.decompression().Validate(); err != nil {
		lines = append(lines, fmt.Sprintf("%s: server.%v", name, err))
	}
	for _, model := range slices.Sorted(maps.Keys(c.Models)) {
		for _, l := range append(c.Models[model].validate(model), c.Models[model].validateDisagg(model, c.Upstreams)...) {
			lines = append(lines, fmt.Sprintf("%s: %s", name, l))
		}
	}
	if c.Server.FirstByteTimeout < 0 || c.Server.IdleTimeout < 0 || c.Server.HeaderTimeout < 0 {
		lines = append(lines, fmt.Sprintf("%s: server: timeouts must be positive", name))
	}
	if h := c.Server.HTTP1; h != "" && h != gateway.HTTP1Gateway && h != gateway.HTTP1NetHTTP {
		lines = append(lines, fmt.Sprintf("%s: server.http1 %q: %q or %q", name, h, gateway.HTTP1Gateway, gateway.HTTP1NetHTTP))
	}
	if c.Server.MaxSpoolBytes < 0 {
		lines = append(lines, fmt.Sprintf("%s: server.max_spool_bytes must be positive", name))
	}
	if d := c.Server.SpoolDir; d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			lines = append(lines, fmt.Sprintf("%s: server.spool_dir %q is not a directory", name, d))
		}
	}
	if len(lines) > 0 {
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	return &c, nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// envPrefix starts every variable applyEnv reads.
const envPrefix = "INFERGATE_"

// applyEnv sets each scalar field of c (strings, booleans, integers, durations) from the
// environment variable named by its YAML path: INFERGATE_ + the keys joined by "_", upper-cased,
// e.g. redis.addr is INFERGATE_REDIS_ADDR and builtin_models INFERGATE_BUILTIN_MODELS. Lists (the
// upstreams) are left to the file, whose header values expand ${ENV} themselves.
func applyEnv(c *Config, lookup func(string) (string, bool)) error {
	var errs []error
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			key, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fv := v.Field(i)
			if opts == "inline" {
				walk(fv, path)
				continue
			}
			if key == "" || key == "-" {
				continue
			}
			name := path + strings.ToUpper(key)
			if fv.Kind() == reflect.Struct {
				walk(fv, name+"_")
				continue
			}
			raw, ok := lookup(envPrefix + name)
			if !ok {
				continue
			}
			if err := setScalar(fv, raw); err != nil {
				errs = append(errs, fmt.Errorf("%s%s=%q: %w", envPrefix, name, raw, err))
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return errors.Join(errs...)
}

func setScalar(v reflect.Value, raw string) error {
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		if err := setScalar(p.Elem(), raw); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case v.Type() == reflect.TypeFor[[]string]():
		// A list from the environment is comma-separated (batch.kafka.brokers, say).
		var vs []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				vs = append(vs, s)
			}
		}
		v.Set(reflect.ValueOf(vs))
	case v.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return err
		}
		v.SetFloat(x)
	default:
		return fmt.Errorf("cannot be set from the environment (%s)", v.Type())
	}
	return nil
}

// mayServe reports whether endpoint ep may serve the public model name m: any model when it
// discovers its models without an allow-list, else those its models or aliases name.
func mayServe(ep upstream.Endpoint, m string) bool {
	if len(ep.Models) == 0 {
		return true
	}
	_, aliased := ep.Aliases[m]
	return aliased || slices.Contains(ep.Models, m)
}
