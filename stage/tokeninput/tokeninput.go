// Package tokeninput serves OpenAI chat completions through upstreams that take token ids
// (models.<name>.input: tokens), as Dynamo's token-input workers and engines without a
// tokenizer of their own do: the gateway renders the model's chat template and tokenizes the
// render (stage/prompt), sends the ids to the upstream's /v1/completions as the prompt,
// and turns its answer, whole or streamed, back into a chat completion: ids (chatcmpl-),
// objects, a message or deltas with the assistant's role, finish_reason, and usage.
//
// Completion requests with text prompts (the KServe bridge's text_input, batch lines) have their
// prompts tokenized the same way; their answers pass on as the upstream sent them.
//
// Stop strings are sent upstream and also applied to the text in the gateway: a backend that
// works on ids may not know them. A stream holds back the text that could be the start of a stop
// string until the next chunk settles it. A choice carrying token_ids and no text (vLLM's
// return_token_ids, a pure token backend) is detokenized here, partial characters held until
// their last byte arrives.
//
// What the gateway cannot map it refuses with a 400 naming the field: logprobs (completion
// logprobs are per token string, chat's per token with bytes) and continue_final_message. Tool
// definitions reach the template; the model's tool-call text comes back as the message content,
// unparsed.
package tokeninput

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/lib/tokenizer"
	"github.com/infergate/infergate/stage/prompt"
)

const (
	chatPath       = "/v1/chat/completions"
	completionPath = "/v1/completions"
	// maxAnswer bounds an upstream's whole (not streamed) answer the gateway reads to convert.
	maxAnswer = 64 << 20
)

// chatOnly are the chat request's members a completion request has no place for: the
// conversation the prompt was rendered from, and what only rendering or chat output uses (the
// prompt is replaced, and max_completion_tokens becomes max_tokens).
var chatOnly = []string{
	"messages", "tools", "tool_choice", "parallel_tool_calls",
	"functions", "function_call", "documents", "chat_template",
	"chat_template_kwargs", "add_generation_prompt", "continue_final_message",
	"add_special_tokens", "max_completion_tokens", "logprobs", "top_logprobs",
	"reasoning_effort", "modalities", "audio", "prediction",
	"web_search_options", "store", "metadata", "mm_processor_kwargs",
	"echo", "suffix", "best_of",
}

// Stage is the interceptor for model m's requests when its upstream takes token ids: chat
// completions become completions of the rendered prompt's ids, and completion prompts given as
// text become ids. Embeddings pass on untouched.
func Stage(m *prompt.Model) pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			switch req.Path {
			case chatPath:
				return chat(ctx, m, req, next)
			case completionPath:
				return completion(ctx, m, req, next)
			}
			return next(ctx, req)
		}
	}
}

// completion sends a completion request's text prompts as ids.
func completion(ctx context.Context, m *prompt.Model, req *pipeline.Request, next pipeline.Handler) (*pipeline.Response, error) {
	w, err := req.Wire()
	if err != nil {
		return nil, err
	}
	raw, _ := w.Get("prompt")
	prompts, err := m.CompletionPrompts(raw)
	if err != nil {
		return nil, err
	}
	var ids any = prompts
	if len(prompts) == 1 {
		req.PromptTokens = prompts[0]
		ids = prompts[0]
	}
	out, err := rewrite(req, w, completionPath, ids)
	if err != nil {
		return nil, err
	}
	return next(ctx, out)
}

// params are what the conversion of a chat request's answer needs from the request.
type params struct {
	stop         []string
	n            int
	includeUsage bool
	promptLen    int
	tok          *tokenizer.Tokenizer
}

func chat(ctx context.Context, m *prompt.Model, req *pipeline.Request, next pipeline.Handler) (*pipeline.Response, error) {
	w, err := req.Wire()
	if err != nil {
		return nil, err
	}
	if err := refuseUnmapped(m.Name(), w); err != nil {
		return nil, err
	}
	p := params{n: 1, tok: m.Tokenizer()}
	stop, _ := w.Get("stop")
	if p.stop, err = stopStrings(stop); err != nil {
		return nil, err
	}
	if raw, ok := w.Get("n"); ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p.n); err != nil || p.n < 1 || p.n > 128 {
			return nil, pipeline.InvalidRequest("n", "invalid_value", "n must be an integer from 1 to 128.")
		}
	}
	if raw, ok := w.Get("stream_options"); ok {
		p.includeUsage = openaiwire.IncludeUsage(raw) // the upstream words a malformed one
	}
	if special(w, "add_special_tokens") {
		in, err := prompt.ChatInput(req)
		if err != nil {
			return nil, err
		}
		if req.PromptTokens, err = m.ChatTokens(ctx, in, true); err != nil {
			return nil, err
		}
	} else if _, _, err := m.PromptLen(ctx, req); err != nil {
		return nil, err
	}
	p.promptLen = len(req.PromptTokens)
	out, err := rewrite(req, w, completionPath, req.PromptTokens)
	if err != nil {
		return nil, err
	}
	res, err := next(ctx, out)
	if err != nil || res.StatusCode != http.StatusOK {
		return res, err // an error object reads the same in both APIs
	}
	res.Header = res.Header.Clone()
	if res.Header == nil {
		res.Header = http.Header{}
	}
	res.Header.Del("Content-Length")
	if res.Stream {
		res.Body = newChatStream(res.Body, &p)
		return res, nil
	}
	return wholeAnswer(res, &p)
}

// refuseUnmapped refuses what a completion's answer cannot give back in chat's terms.
func refuseUnmapped(model string, w *openaiwire.Body) error {
	for _, k := range []string{"logprobs", "top_logprobs"} {
		if raw, ok := w.Get(k); ok && string(raw) != "null" && string(raw) != "false" && string(raw) != "0" {
			return pipeline.InvalidRequest(k, "unsupported_parameter", fmt.Sprintf(
				"%s is not supported for model `%s`: its upstream takes token ids, and the gateway does not map completion logprobs to chat logprobs.", k, model))
		}
	}
	if special(w, "continue_final_message") {
		return pipeline.InvalidRequest("continue_final_message", "unsupported_parameter", fmt.Sprintf(
			"continue_final_message is not supported for model `%s`: its upstream takes token ids rendered by the gateway, which opens a new turn.", model))
	}
	return nil
}

// special reports whether member name is true.
func special(w *openaiwire.Body, name string) bool {
	raw, _ := w.Get(name)
	return string(raw) == "true"
}

// stopStrings reads stop: a string, a list of strings, or null.
func stopStrings(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, pipeline.InvalidRequest("stop", "invalid_type", "stop must be a string or a list of strings.")
	}
	return slices.DeleteFunc(list, func(s string) bool { return s == "" }), nil
}

// rewrite is a clone of req for path with the chat-only members dropped, max_completion_tokens
// as max_tokens, and prompt set to ids; w is req's view. The clone's edit leaves req (the
// client's request, which an earlier stage may retry or log) as it was.
func rewrite(req *pipeline.Request, w *openaiwire.Body, path string, ids any) (*pipeline.Request, error) {
	maxTokens, _ := w.Get("max_completion_tokens")
	if len(maxTokens) == 0 || string(maxTokens) == "null" {
		maxTokens, _ = w.Get("max_tokens")
	}
	out := req.Clone()
	out.Path = path
	err := out.Edit(func(b *openaiwire.Body) error {
		b.Set("prompt", appendIDs(nil, ids))
		if len(maxTokens) > 0 && string(maxTokens) != "null" {
			b.Set("max_tokens", maxTokens)
		} else {
			b.Drop("max_tokens")
		}
		b.Drop(chatOnly...) // after the sets, as EditBody dropped: max_completion_tokens goes
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func appendIDs(b []byte, ids any) []byte {
	switch v := ids.(type) {
	case []int:
		b = append(b, '[')
		for i, id := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(id), 10)
		}
		return append(b, ']')
	case [][]int:
		b = append(b, '[')
		for i, p := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendIDs(b, p)
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

// chatID is the chat completion's id for a completion's: OpenAI's prefixes.
func chatID(id string) string {
	if rest, ok := strings.CutPrefix(id, "cmpl-"); ok {
		return "chatcmpl-" + rest
	}
	if strings.HasPrefix(id, "chatcmpl-") || id == "" {
		return id
	}
	return "chatcmpl-" + id
}

// cutStop cuts text at its first stop string: the text before it and whether one was found.
func cutStop(text string, stop []string) (string, string, bool) {
	at, which := -1, ""
	for _, s := range stop {
		if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
			at, which = i, s
		}
	}
	if at < 0 {
		return text, "", false
	}
	return text[:at], which, true
}

var (
	reasonStop   = "stop"
	errBadAnswer = pipeline.ServerError(http.StatusBadGateway, "bad_upstream_response",
		"The upstream's answer to the completion the gateway made of this chat request could not be read as a completion.")
)

// wholeAnswer reads a whole completion and answers with its chat completion.
func wholeAnswer(res *pipeline.Response, p *params) (*pipeline.Response, error) {
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil || len(raw) > maxAnswer {
		res.Body.Finish(nil)
		if err == nil {
			return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_response_too_large",
				fmt.Sprintf("The upstream's answer is over %d bytes.", maxAnswer))
		}
		return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_failed", "Reading the upstream's answer failed: "+err.Error())
	}
	u := res.Body.Finish(nil)
	c, err := openaiwire.DecodeCompletion(raw)
	if err != nil {
		return nil, errBadAnswer
	}
	out := openaiwire.ChatCompletion{Header: openaiwire.Header{ID: chatID(c.ID), Object: "chat.completion", Created: c.Created,
		Model: c.Model, SystemFingerprint: c.SystemFingerprint}, Choices: make([]openaiwire.ChatChoice, len(c.Choices))}
	var completionTokens int64
	for i, ch := range c.Choices {
		text := ch.Text
		if text == "" && len(ch.TokenIDs) > 0 {
			text = decodeOutput(p.tok, ch.TokenIDs)
		}
		cc := openaiwire.ChatChoice{Index: ch.Index, FinishReason: ch.FinishReason, StopReason: ch.StopReason}
		if cut, which, ok := cutStop(text, p.stop); ok {
			text, cc.FinishReason = cut, &reasonStop
			cc.StopReason, _ = json.Marshal(which)
		}
		cc.Message = openaiwire.Message{Role: "assistant", Content: &text}
		out.Choices[i] = cc
		if len(ch.TokenIDs) > 0 {
			completionTokens += int64(len(ch.TokenIDs)) // what was generated, special tokens too
		} else {
			completionTokens += int64(p.tok.Count(text, tokenizer.Options{}))
		}
	}
	out.Usage = c.Usage
	if out.Usage == nil {
		out.Usage = &openaiwire.Usage{PromptTokens: int64(p.promptLen), CompletionTokens: completionTokens}
		out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	}
	// The upstream's usage is written as counts (its details dropped), the fingerprint last:
	// the bytes this stage's clients have always had.
	b := out.AppendJSON(nil, openaiwire.Options{FingerprintLast: true})
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens, u.CompletionTokens = out.Usage.PromptTokens, out.Usage.CompletionTokens
	}
	res.Body = pipeline.NewBody(b, u)
	return res, nil
}

// decodeOutput is the text of a model's output ids, which continue its prompt: a
// SentencePiece-style model's first word keeps its leading space, as vLLM returns it.
func decodeOutput(tok *tokenizer.Tokenizer, ids []int) string {
	d := tok.NewDecoder(true).Continuing()
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}
