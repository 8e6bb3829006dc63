// Package prompt is the gateway's view of one LLM's prompts: its tokenizer and chat template
// (adapters/llm/tokenizer, adapters/llm/chattemplate), the tokens a request's prompt comes to,
// the context-length check every surface's requests pass (a pipeline stage), and vLLM's
// /tokenize and /detokenize.
//
// A chat request is rendered with the model's template and tokenized in one pass over the
// render, the request's own text (message contents, and special-token text anywhere in the
// request) marked plain: a user who types "<|im_end|>" gets the characters, not a role boundary
// (Options.SpecialInContent restores vLLM's behaviour, which reads them as the token).
package prompt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/infergate/infergate/adapters/llm/chattemplate"
	"github.com/infergate/infergate/adapters/llm/tokenizer"
	"github.com/infergate/infergate/adapters/pipeline"
)

// Options configure a Model.
type Options struct {
	// MaxModelLen is the model's context length in tokens: prompt plus completion. 0: no check.
	MaxModelLen int
	// SpecialInContent reads special-token text in message contents as the special token, as
	// vLLM does; by default it is plain text, so a user cannot forge a role boundary.
	SpecialInContent bool
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
// chat: templates write their own BOS). Errors are for the client (chattemplate.OpenAIError
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
		// one render where RenderSegments needs two.
		text, err := m.tmpl.Render(ctx, in)
		if err != nil {
			return "", opts, chattemplate.OpenAIError(err)
		}
		return text, opts, nil
	}
	text, plain, err := m.tmpl.RenderSpans(ctx, in, m.specials)
	if err != nil {
		return "", opts, chattemplate.OpenAIError(err)
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
// ok is false for a request without a prompt this package counts (embeddings).
func (m *Model) PromptLen(ctx context.Context, req *pipeline.Request) (n int, ok bool, err error) {
	switch req.Path {
	case "/v1/chat/completions":
		in, err := chattemplate.DecodeRequest(req.Body())
		if err != nil {
			return 0, false, chattemplate.OpenAIError(err)
		}
		text, opts, err := m.chatText(ctx, in, false)
		if err != nil {
			return 0, false, err
		}
		return m.tok.Count(text, opts), true, nil
	case "/v1/completions":
		f, err := req.Fields()
		if err != nil {
			return 0, false, pipeline.InvalidJSON(err)
		}
		return m.completionPromptLen(f["prompt"])
	}
	return 0, false, nil
}

// completionPromptLen counts the longest prompt of a completion request.
func (m *Model) completionPromptLen(raw json.RawMessage) (int, bool, error) {
	bad := func(msg string) (int, bool, error) {
		return 0, false, pipeline.InvalidRequest("prompt", "invalid_prompt", msg)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return bad("you must provide a prompt")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(m.TextTokens(s, true)), true, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return bad("prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	longest := 0
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		return len(ids), true, nil // one prompt of token ids
	}
	for _, p := range list {
		n := 0
		switch {
		case json.Unmarshal(p, &s) == nil:
			n = len(m.TextTokens(s, true))
		case json.Unmarshal(p, &ids) == nil:
			n = len(ids)
		default:
			return bad("each prompt of a list must be a string or a list of token ids")
		}
		longest = max(longest, n)
	}
	return longest, true, nil
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
func (m *Model) Limit() pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		if m.opts.MaxModelLen <= 0 {
			return next
		}
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			n, ok, err := m.PromptLen(ctx, req)
			if err != nil {
				return nil, err
			}
			if ok {
				want := max(req.Routing().MaxTokens, 1)
				if n+want > m.opts.MaxModelLen {
					return nil, ContextLengthExceeded(m.opts.MaxModelLen, n, max(req.Routing().MaxTokens, 0))
				}
			}
			return next(ctx, req)
		}
	}
}
