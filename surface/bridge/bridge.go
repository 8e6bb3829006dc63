// Package bridge serves every completions and chat model of the OpenAI proxy as a KServe model, the
// way Dynamo's KServe frontend serves its LLMs (kserve.md §4): Triton and KServe clients reach the
// same upstreams, with the same routing, failover and metrics, through text_input and text_output.
//
// Each bridge model is named like the public OpenAI model and reports platform "openai" and
// backend "infergate_bridge" (Platform, Backend), max_batch_size 0, and the tensors
//
//	inputs:  text_input BYTES [1]; optional stream BOOL [1], streaming BOOL [1],
//	         sampling_parameters BYTES [1] (a JSON object)
//	outputs: text_output BYTES [-1], finish_reason BYTES [-1] (one element per choice)
//
// A request becomes one OpenAI request: POST /v1/completions {"model", "prompt": text_input,
// "stream"} or, for an endpoint of kind chat, /v1/chat/completions with the text as one user
// message; the members of sampling_parameters (temperature, max_tokens, n, stop, ...) are added to
// that body. text_input may also come shaped [1,1]. stream (or streaming) true asks for a stream:
// ModelStreamInfer and REST generate_stream then send one response per upstream chunk, with each
// choice's delta text and finish_reason "" and triton_final_response false, and end with one
// final response that carries every choice's finish_reason. ModelInfer refuses such a request
// with INVALID_ARGUMENT "Streaming is not supported for this endpoint", as Dynamo does; without
// stream it answers the whole completion in one response. The KServe request id is sent upstream
// as X-Request-Id.
//
// Upstream failures keep their meaning: HTTP 400 (and other 4xx) is INVALID_ARGUMENT, 401
// UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 429 UNAVAILABLE (retry later, as
// Triton's full queue), 502, 503 and 504 UNAVAILABLE, other 5xx INTERNAL, each with the upstream's
// message; an upstream that dies mid-stream is UNAVAILABLE. Cancelling the call or the stream
// cancels the upstream request.
//
// A model with a Granite processor (models.<name>.processor; the runtime names them with
// WithChatResult) is served as chat whatever its endpoints' kind: the processor renders the
// prompt from the chat request and parses the model's text back into a structured message
// (stage/granitestage). Its contract adds
//
//	inputs:  optional chat_template_kwargs BYTES [1] (a JSON object)
//	outputs: chat_result BYTES [-1] (one JSON object per choice)
//
// chat_template_kwargs becomes the chat request's chat_template_kwargs, where vLLM's chat API
// and the Granite stage take Granite's request fields: documents, controls (citations,
// hallucinations, length, originality), thinking and sanitize, as in
//
//	{"documents": [{"doc_id": 1, "text": "..."}], "controls": {"citations": true}, "thinking": true}
//
// (sampling_parameters may then not set chat_template_kwargs too). Members of the chat request
// itself, such as tools, go in sampling_parameters, whose members join the request's top level.
// With Triton's Python client: an InferInput("chat_template_kwargs", [1], "BYTES") holding
// json.dumps(kwargs); with REST generate: "chat_template_kwargs": "<the JSON, as a string>".
//
// Each chat_result element is the assistant message as /v1/chat/completions answers it for that
// choice, as JSON: role, content (null for an answer that is only tool calls), reasoning_content,
// tool_calls (OpenAI's, arguments a JSON string), Granite's citations, documents and
// hallucinations (granite-io's shapes, offsets in characters), and parse_error when the model's
// output could not be fully parsed (the parts that could not are then content as the model wrote
// them: see the Granite processing section of the README). text_output stays the content.
// chat_result is in the answer when the request asks for every output or names it. In a stream,
// as finish_reason, it is "" in each response but the final one, which carries the whole message;
// text_output streams the content as the stage parses it (a chunk of reasoning is a response with
// an empty text_output: the reasoning comes whole in chat_result).
//
// The tensors are declared here in Go, not with protoc-gen-infergate: generated models carry the
// fixed name of their annotation (in their config and their error messages) while a bridge model
// takes the name of whatever the proxy routes; an RPC is either unary (one response) or
// server-streaming (a decoupled config, refused by ModelInfer) while a bridge model decides per
// request; and generated responses cannot mark the last data response final.
package bridge

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
)

// Bridge keeps one bridge model in a registry for each completions or chat model the proxy routes.
type Bridge struct {
	reg        *engines.Registry
	proxy      *openai.Proxy
	log        *slog.Logger
	chatResult func(model string) bool

	mu    sync.Mutex
	owned map[string]owned // bridge models this Bridge registered, by name
	taken map[string]bool  // names skipped because another model holds them (warned once)
}

type owned struct {
	entry *engines.Entry
	model *model
}

// Option configures a Bridge.
type Option func(*Bridge)

// WithLogger sets the logger for models added, removed and skipped; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(b *Bridge) { b.log = l } }

// WithChatResult names the models that have a Granite processor (models.<name>.processor):
// their bridge models always send chat, take chat_template_kwargs and answer chat_result (see
// the package doc). It is asked once per model, when its bridge model is added.
func WithChatResult(has func(model string) bool) Option {
	return func(b *Bridge) { b.chatResult = has }
}

// New returns a bridge from proxy's models to reg, kept in step with them from then on (it
// watches the proxy's model set). It registers nothing until the first change or Sync.
func New(reg *engines.Registry, proxy *openai.Proxy, opts ...Option) *Bridge {
	b := &Bridge{reg: reg, proxy: proxy, log: slog.Default(), owned: map[string]owned{}, taken: map[string]bool{}}
	for _, o := range opts {
		o(b)
	}
	proxy.Watch(b.Sync)
	return b
}

// Sync makes the registry hold one bridge model per model the proxy routes (except embeddings
// models) and no bridge model for a name it no longer routes. A name another model already holds
// (a built-in, a KServe upstream's model) is skipped with a warning, never replaced. New calls it
// when the proxy's models change; it is safe to call concurrently and
// repeatedly, and does no I/O.
func (b *Bridge) Sync() {
	want := map[string]string{}
	for _, m := range b.proxy.Models() {
		if m.Kind != upstream.KindEmbeddings {
			want[m.Name] = m.Kind
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(b.owned)) {
		o := b.owned[name]
		ours := b.reg.Lookup(name) == o.entry
		if kind, ok := want[name]; ok && ours {
			o.model.setKind(kind)
			continue
		}
		if ours {
			b.reg.Remove(name)
			b.log.Info("bridge: KServe model removed", "model", name)
		}
		delete(b.owned, name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := b.owned[name]; ok {
			continue
		}
		m := newModel(name, want[name], b.proxy, b.chatResult != nil && b.chatResult(name))
		e, err := b.reg.Register(m)
		if err != nil {
			if !b.taken[name] {
				b.taken[name] = true
				b.log.Warn("bridge: not serving an OpenAI model as a KServe model: another model has its name", "model", name, "err", err)
			}
			continue
		}
		delete(b.taken, name)
		b.owned[name] = owned{entry: e, model: m}
		b.log.Info("bridge: KServe model added", "model", name, "kind", want[name])
	}
	for name := range b.taken {
		if _, ok := want[name]; !ok {
			delete(b.taken, name)
		}
	}
}
