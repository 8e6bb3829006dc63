// Package prompt is the gateway's view of one LLM's prompts: its tokenizer and chat template
// (lib/tokenizer, lib/chattemplate), the tokens a request's prompt comes to,
// the context-length check every surface's requests pass (a pipeline stage), and vLLM's
// /tokenize and /detokenize.
//
// A chat request is rendered with the model's template and tokenized in one pass over the
// render, the request's own text (message contents, and special-token text anywhere in the
// request) marked plain: a user who types "<|im_end|>" gets the characters, not a role boundary
// (Options.SpecialInContent restores vLLM's behaviour, which reads them as the token). Marking
// takes a second render, which chattemplate.RenderSpans skips when the request's text cannot
// hold or complete a special token (for Qwen and Llama: its contents hold no '<').
package prompt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chattemplate"
	"github.com/infergate/infergate/lib/tokenizer"
)

// Options configure a Model.
type Options struct {
	// MaxModelLen is the model's context length in tokens: prompt plus completion. 0: no check.
	MaxModelLen int
	// SpecialInContent reads special-token text in message contents as the special token, as
	// vLLM does; by default it is plain text, so a user cannot forge a role boundary.
	SpecialInContent bool
	// Counted, if set, is told the prompt tokens the Usage stage counted for an answer whose
	// upstream reported no usage (for a metric: upstream-reported usage is counted elsewhere).
	Counted func(n int64)
}

// Model is one model's tokenizer and chat template. It is safe for concurrent use.
type Model struct {
	name     string
	tok      *tokenizer.Tokenizer
	tmpl     *chattemplate.Template // nil: the tokenizer has no chat template
	specials *chattemplate.SpecialTokens
	opts     Options
}

// Load reads the tokenizer in dir (tokenizer.json, tokenizer_config.json, optionally
// generation_config.json and chat_template.jinja) and compiles its chat template, for the model
// clients call name. Errors name the file and the reason.
func Load(name, dir string, opts Options) (*Model, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	return New(name, tok, opts)
}

// New is Load with a tokenizer already loaded.
func New(name string, tok *tokenizer.Tokenizer, opts Options) (*Model, error) {
	if opts.MaxModelLen < 0 {
		return nil, fmt.Errorf("model %s: max_model_len %d is negative", name, opts.MaxModelLen)
	}
	m := &Model{name: name, tok: tok, opts: opts, specials: chattemplate.NewSpecialTokens(tok.AddedTokens())}
	cfg := tok.Config()
	if cfg.ChatTemplate != "" {
		t, err := chattemplate.Compile(cfg.ChatTemplate, chattemplate.Options{BOS: cfg.BOSToken, EOS: cfg.EOSToken})
		if err != nil {
			return nil, fmt.Errorf("model %s: chat template: %w", name, err)
		}
		m.tmpl = t
	}
	return m, nil
}

// Name is the model's public name.
func (m *Model) Name() string { return m.name }

// MaxModelLen is the configured context length (0: none).
func (m *Model) MaxModelLen() int { return m.opts.MaxModelLen }

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// ChatTokens renders a conversation with the model's chat template and tokenizes the render;
// addSpecial adds the tokenizer's post-processor tokens (vLLM's add_special_tokens, false for
// chat: templates write their own BOS). Errors are for the client (TemplateError
// maps them), or an *pipeline.Error when the model has no chat template.
func (m *Model) ChatTokens(ctx context.Context, in *chattemplate.Input, addSpecial bool) ([]int, error) {
	text, opts, err := m.chatText(ctx, in, addSpecial)
	if err != nil {
		return nil, err
	}
	return m.tok.Encode(text, opts), nil
}

// chatText renders a conversation and says how to tokenize the render.
func (m *Model) chatText(ctx context.Context, in *chattemplate.Input, addSpecial bool) (string, tokenizer.Options, error) {
	opts := tokenizer.Options{ParseSpecial: true, AddSpecialTokens: addSpecial}
	if m.tmpl == nil {
		return "", opts, pipeline.InvalidRequest("messages", "chat_template_missing",
			fmt.Sprintf("Model `%s` has no chat template (its tokenizer_config.json names none): send a prompt to /v1/completions instead.", m.name))
	}
	if m.opts.SpecialInContent {
		// Special-token text is read as such everywhere: the render alone will do, and it is
		// one render where RenderSpans may need two.
		text, err := m.tmpl.Render(ctx, in)
		if err != nil {
			return "", opts, TemplateError(err)
		}
		return text, opts, nil
	}
	text, plain, err := m.tmpl.RenderSpans(ctx, in, m.specials)
	if err != nil {
		return "", opts, TemplateError(err)
	}
	opts.Plain = plain
	return text, opts, nil
}

// TextTokens tokenizes a completion prompt; addSpecial as vLLM's add_special_tokens (true for
// completions). Special-token text in it is read as the token, as vLLM does: a completion
// prompt is the whole prompt, with no role boundaries to forge.
func (m *Model) TextTokens(text string, addSpecial bool) []int {
	return m.tok.Encode(text, tokenizer.Options{ParseSpecial: true, AddSpecialTokens: addSpecial})
}

// PromptLen is the token count of a request's prompt: a chat request's render, or the longest of
// a completion request's prompts (a string, a list of strings, token ids, or lists of them).
// ok is false for a request without a prompt this package counts (embeddings). A request with
// one prompt keeps its ids in req.PromptTokens, and a request that has them is not counted again.
func (m *Model) PromptLen(ctx context.Context, req *pipeline.Request) (n int, ok bool, err error) {
	if req.PromptTokens != nil {
		return len(req.PromptTokens), true, nil
	}
	switch req.Path {
	case "/v1/chat/completions":
		return m.chatLenOrFits(ctx, req, -1) // no room: always counted
	case "/v1/completions":
		w, err := req.Wire()
		if err != nil {
			return 0, false, err
		}
		prompt, _ := w.Get("prompt")
		prompts, err := m.CompletionPrompts(prompt)
		if err != nil {
			return 0, false, err
		}
		longest := 0
		for _, p := range prompts {
			longest = max(longest, len(p))
		}
		if len(prompts) == 1 {
			req.PromptTokens = prompts[0]
		}
		return longest, true, nil
	}
	return 0, false, nil
}

// CompletionPrompts reads a completion request's prompt field (a string, a list of strings, token
// ids, or a list mixing strings and lists of token ids) and returns each prompt's token ids,
// strings tokenized as vLLM does (TextTokens with add_special_tokens). Errors are OpenAI 400s.
func (m *Model) CompletionPrompts(raw json.RawMessage) ([][]int, error) {
	bad := func(msg string) ([][]int, error) {
		return nil, pipeline.InvalidRequest("prompt", "invalid_prompt", msg)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return bad("you must provide a prompt")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]int{m.TextTokens(s, true)}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return bad("prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return [][]int{ids}, nil // one prompt of token ids
	}
	out := make([][]int, len(list))
	for i, p := range list {
		switch {
		case json.Unmarshal(p, &s) == nil:
			out[i] = m.TextTokens(s, true)
		case json.Unmarshal(p, &ids) == nil:
			out[i] = ids
		default:
			return bad("each prompt of a list must be a string or a list of token ids")
		}
		ids = nil
	}
	return out, nil
}

// ContextLengthExceeded is OpenAI's 400 for a request whose prompt and completion do not fit the
// model's context, in the words vLLM uses (clients look for "maximum context length").
func ContextLengthExceeded(maxLen, prompt, completion int) *pipeline.Error {
	e := pipeline.InvalidRequest("input_tokens", "context_length_exceeded", fmt.Sprintf(
		"This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt "+
			"contains at least %d input tokens, for a total of at least %d tokens. Please reduce the length of the "+
			"input prompt or the number of requested output tokens.", maxLen, completion, prompt, prompt+completion))
	return e
}

// Limit is the stage that refuses, before any upstream is asked, a request whose prompt plus
// max_tokens (max_completion_tokens) does not fit MaxModelLen, with ContextLengthExceeded; as in
// vLLM, a prompt as long as the context fails even when it asks for one token. A model without
// MaxModelLen passes every request on untouched (its body is not even parsed).
//
// keepIDs says that a later stage reads the prompt's ids (req.PromptTokens: token input,
// cache-aware routing, disaggregation's prompt length), so every prompt is tokenized here and
// its ids kept. Without it, a chat whose render is shorter in tokens than the room left, by the
// tokenizer's cheap bound (tokenizer.MaxTokens: a byte-level token is a byte or more), passes
// without being tokenized: the check needs no exact count for the many requests far from the
// limit, and the Usage stage counts exactly after the answer if the upstream says nothing.
func (m *Model) Limit(keepIDs bool) pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		if m.opts.MaxModelLen <= 0 {
			return next
		}
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			want := max(req.Routing().MaxTokens, 1)
			var (
				n   int
				ok  bool // n counted: false for an uncounted prompt (embeddings) or one the bound passed
				err error
			)
			if !keepIDs && req.PromptTokens == nil && req.Path == "/v1/chat/completions" {
				n, ok, err = m.chatLenOrFits(ctx, req, m.opts.MaxModelLen-want)
			} else {
				n, ok, err = m.PromptLen(ctx, req)
			}
			if err != nil {
				return nil, err
			}
			if ok && n+want > m.opts.MaxModelLen {
				return nil, ContextLengthExceeded(m.opts.MaxModelLen, n, max(req.Routing().MaxTokens, 0))
			}
			return next(ctx, req)
		}
	}
}

// chatLenOrFits renders a chat request and returns ok false if its tokens' bound is at most room
// (it fits; not tokenized), else its exact length (ok true), its ids kept in req.PromptTokens.
// A request with parts other than text (images) is counted on its text alone, and its ids are
// not kept: they are not the prompt's.
func (m *Model) chatLenOrFits(ctx context.Context, req *pipeline.Request, room int) (n int, ok bool, err error) {
	in, skipped, err := chatTextInput(req)
	if err != nil {
		return 0, false, err
	}
	text, opts, err := m.chatText(ctx, in, false)
	if err != nil {
		return 0, false, err
	}
	// No room (PromptLen's count, or max_tokens alone over the context): no bound to look for.
	if room >= 0 {
		if b := m.tok.MaxTokens(text, opts); b >= 0 && b <= room {
			if r, _ := ctx.Value(renderedKey{}).(*rendered); r != nil {
				r.text, r.opts, r.ok = text, opts, true
			}
			return 0, false, nil
		}
	}
	ids := m.tok.Encode(text, opts)
	if skipped == 0 {
		req.PromptTokens = ids
	}
	return len(ids), true, nil
}

// Usage is the stage that fills in what a request used when the upstream's answer says nothing
// of it (a stream the client asked no usage for, a server that never sends one): the prompt's
// tokens, counted with the model's tokenizer, so the guard's token budgets settle on exact counts
// and batch usage holds them. It counts only then, after the answer, unless an inner stage has
// counted already (req.PromptTokens). The answer the client gets is not changed.
func (m *Model) Usage() pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			var r *rendered
			if m.opts.MaxModelLen > 0 && req.Path == "/v1/chat/completions" {
				r = new(rendered)
				ctx = context.WithValue(ctx, renderedKey{}, r)
			}
			res, err := next(ctx, req)
			if err != nil {
				return res, err
			}
			res.Body = &usageBody{Body: res.Body, m: m, ctx: context.WithoutCancel(ctx), req: req, render: r}
			return res, nil
		}
	}
}

// rendered is a chat's render that the context-length check (Limit) made and did not tokenize,
// since it fit by the bound: the Usage stage around it counts its tokens from it, if it must,
// rather than rendering again.
type rendered struct {
	text string
	opts tokenizer.Options
	ok   bool
}

type renderedKey struct{}

type usageBody struct {
	pipeline.Body
	m        *Model
	ctx      context.Context
	req      *pipeline.Request
	render   *rendered // nil, or what Limit rendered
	finished bool
	usage    pipeline.Usage
}

func (b *usageBody) Finish(clientErr error) pipeline.Usage {
	if b.finished {
		return b.usage
	}
	b.finished = true
	u := b.Body.Finish(clientErr)
	if u.Status == 200 && u.PromptTokens == 0 && u.CompletionTokens == 0 {
		if r := b.render; r != nil && r.ok && b.req.PromptTokens == nil {
			u.PromptTokens = int64(b.m.tok.Count(r.text, r.opts))
		} else {
			u.PromptTokens = b.m.promptTotal(b.ctx, b.req)
		}
		if u.PromptTokens > 0 && b.m.opts.Counted != nil {
			b.m.opts.Counted(u.PromptTokens)
		}
	}
	b.usage = u
	return u
}

// promptTotal is the prompt tokens of a request as OpenAI's usage counts them: every prompt of a
// completion request (or input of an embeddings request) summed; 0 when it cannot be counted.
func (m *Model) promptTotal(ctx context.Context, req *pipeline.Request) int64 {
	if req.PromptTokens != nil {
		return int64(len(req.PromptTokens))
	}
	field := "prompt"
	switch req.Path {
	case "/v1/chat/completions":
		n, _, err := m.PromptLen(ctx, req)
		if err != nil {
			return 0
		}
		return int64(n)
	case "/v1/embeddings":
		field = "input"
	}
	w, err := req.Wire()
	if err != nil {
		return 0
	}
	raw, _ := w.Get(field)
	prompts, err := m.CompletionPrompts(raw)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range prompts {
		n += int64(len(p))
	}
	return n
}
