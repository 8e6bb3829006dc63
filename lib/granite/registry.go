package granite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// InputProcessor renders a chat request as a prompt string (granite-io's InputProcessor).
// addGenerationPrompt appends the header of the assistant turn the model is to write.
type InputProcessor interface {
	Render(req *ChatRequest, addGenerationPrompt bool) (string, error)
}

// OutputProcessor turns completions back into chat results (granite-io's OutputProcessor).
// req is the request that produced them, or nil. It must not fail on model output: what it
// cannot parse it returns as content, with AssistantMessage.ParseError set.
type OutputProcessor interface {
	Parse(gens []Generation, req *ChatRequest) []Result
}

// IOProcessor answers a chat request, calling its Backend zero or more times
// (granite-io's InputOutputProcessor).
type IOProcessor interface {
	Chat(ctx context.Context, req *ChatRequest) ([]Result, error)
}

// Backend is a string completions API (an OpenAI /v1/completions upstream, a KServe model
// with text_input/text_output, ...): a rendered prompt in, one Generation per choice out.
type Backend interface {
	Generate(ctx context.Context, req GenerateRequest) ([]Generation, error)
}

// GenerateRequest is one completions call.
type GenerateRequest struct {
	Prompt string
	// Params are the completion parameters, OpenAI /v1/completions fields (max_tokens, n,
	// stop, temperature, skip_special_tokens, ...). A processor copies before changing them.
	Params map[string]any
}

// Entry is what a registry name resolves to: an input and an output processor, and
// optionally how to build an IO processor over a backend (nil: NewSimple).
type Entry struct {
	Input  InputProcessor
	Output OutputProcessor
	NewIO  func(Backend) IOProcessor
}

// Registry finds processors by name or alias: exact, case-sensitive names, as granite-io's
// factories match them. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*Entry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[string]*Entry{}} }

// Names returns the names granite-io registers a format's processors under, the canonical
// name first (a fresh slice each call).
func (v Version) Names() []string {
	switch v {
	case V32:
		return []string{"Granite 3.2", "ibm-granite/granite-3.2-2b-instruct",
			"ibm-granite/granite-3.2-8b-instruct", "granite3.2", "granite3.2:8b", "granite3.2:2b",
			"ibm-granite/granite-8b-instruct-preview-4k"}
	case V33:
		return []string{"Granite 3.3", "ibm-granite/granite-3.3-2b-instruct",
			"ibm-granite/granite-3.3-8b-instruct", "granite3.3", "granite3.3:2b", "granite3.3:8b"}
	}
	return nil
}

// NewDefaultRegistry returns a registry holding Granite 3.2 and 3.3 under granite-io's names
// and aliases (Version.Names); opts configure both processors.
func NewDefaultRegistry(opts ...Option) *Registry {
	r := NewRegistry()
	for _, v := range []Version{V32, V33} {
		p := New(v, opts...)
		names := v.Names()
		if err := r.Register(Entry{Input: p, Output: p}, names[0], names[1:]...); err != nil {
			panic(err) // the two name lists are disjoint
		}
	}
	return r
}

// Register adds e under name and every alias. A name already taken is an error and nothing
// is registered. Input and Output are required.
func (r *Registry) Register(e Entry, name string, aliases ...string) error {
	if e.Input == nil || e.Output == nil {
		return fmt.Errorf("granite: registering %q: an entry needs an input and an output processor", name)
	}
	all := append([]string{name}, aliases...)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range all {
		if n == "" {
			return fmt.Errorf("granite: registering %q: empty name", name)
		}
		if _, dup := r.entries[n]; dup || slices.Contains(all[:i], n) {
			return fmt.Errorf("granite: %q is already registered", n)
		}
	}
	ep := &e
	for _, n := range all {
		r.entries[n] = ep
	}
	return nil
}

// Lookup returns the entry registered under name.
func (r *Registry) Lookup(name string) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// IOProcessor builds name's IO processor over b.
func (r *Registry) IOProcessor(name string, b Backend) (IOProcessor, error) {
	e, ok := r.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("granite: no processor registered for %q", name)
	}
	if e.NewIO != nil {
		return e.NewIO(b), nil
	}
	return NewSimple(e.Input, e.Output, b), nil
}

// Names lists every registered name and alias, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.entries))
}

// Simple is the one-call IO processor: render, one Backend call, parse
// (granite-io's ModelDirectInputOutputProcessor).
type Simple struct {
	in  InputProcessor
	out OutputProcessor
	b   Backend
}

// NewSimple composes an input processor, a backend and an output processor.
func NewSimple(in InputProcessor, out OutputProcessor, b Backend) *Simple {
	return &Simple{in: in, out: out, b: b}
}

// Chat renders req, calls the backend once with req.Params, and parses every choice.
func (s *Simple) Chat(ctx context.Context, req *ChatRequest) ([]Result, error) {
	g, err := s.Prepare(req)
	if err != nil {
		return nil, err
	}
	gens, err := s.b.Generate(ctx, g)
	if err != nil {
		return nil, fmt.Errorf("granite: backend: %w", err)
	}
	return s.out.Parse(gens, req), nil
}

// Prepare is the completions call Chat makes for req: the rendered prompt and req.Params. For
// Granite 3.3 with citations asked for it sets skip_special_tokens=false, so that vLLM keeps
// the cite and plugin tokens the parser needs. A caller that streams the call itself (and
// parses it with an OutputStream) uses this.
func (s *Simple) Prepare(req *ChatRequest) (GenerateRequest, error) {
	prompt, err := s.in.Render(req, true)
	if err != nil {
		return GenerateRequest{}, err
	}
	params := req.Params
	if p, ok := s.in.(*Processor); ok && p.version == V33 && req.Controls != nil && req.Controls.Citations {
		params = maps.Clone(params)
		if params == nil {
			params = map[string]any{}
		}
		params["skip_special_tokens"] = false
	}
	return GenerateRequest{Prompt: prompt, Params: params}, nil
}
