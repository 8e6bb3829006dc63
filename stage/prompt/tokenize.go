package prompt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chattemplate"
)

// maxTokenizeBody bounds a /tokenize or /detokenize body.
const maxTokenizeBody = 16 << 20

// ErrNoUpstream is what Endpoints.Forward returns (or wraps) when no upstream serving the model
// answers /tokenize and /detokenize itself: the gateway then has no way to tokenize the model.
var ErrNoUpstream = errors.New("no upstream serving the model tokenizes")

// Endpoints serves vLLM's POST /tokenize and POST /detokenize for the models Lookup knows. They
// are vLLM's shapes: /tokenize takes a completion prompt (model, prompt, add_special_tokens:
// true) or a conversation (model, messages, tools, add_generation_prompt: true,
// add_special_tokens: false, chat_template_kwargs) and answers count, max_model_len, tokens and,
// when return_token_strs, token_strs; /detokenize takes model and tokens and answers prompt.
// A model without a tokenizer is passed on to its upstream when Forward finds one that answers
// these endpoints itself (a vLLM server).
type Endpoints struct {
	// Lookup returns the model clients call name, or nil when it has no tokenizer configured.
	Lookup func(name string) *Model
	// Visible, when set, hides the models a caller may not use (the guard's API key model
	// lists): such a model is, to that caller, one the gateway has no tokenizer for, and is
	// never forwarded.
	Visible func(ctx context.Context, model string) bool
	// Forward, when set, answers for a visible model with no tokenizer: it sends the request's
	// body (which names model) to path, /tokenize or /detokenize, of an upstream serving the
	// model that has those endpoints itself, and returns the upstream's status and answer. Its
	// error is ErrNoUpstream when no such upstream serves the model, a *pipeline.Error for the
	// gateway's own answers (no healthy upstream, ...), or the context's when the caller went
	// away.
	Forward func(ctx context.Context, model, path string, body []byte) (status int, answer []byte, err error)
}

// The endpoints' paths, as Serve takes them.
const (
	pathTokenize   = "/tokenize"
	pathDetokenize = "/detokenize"
)

// Mount registers the routes on mux.
func (e *Endpoints) Mount(mux *http.ServeMux) {
	for _, path := range []string{pathTokenize, pathDetokenize} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { e.serveHTTP(w, r, path) })
	}
}

func (e *Endpoints) serveHTTP(w http.ResponseWriter, r *http.Request, path string) {
	body, perr := readBody(w, r)
	var status int
	var answer []byte
	if perr == nil {
		status, answer, perr = e.Serve(r.Context(), path, body)
	}
	if perr != nil {
		perr.Write(w)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// Serve answers the JSON body of a POST to path, /tokenize or /detokenize: the HTTP status and
// the JSON answer (a forwarded request's are its upstream's, error statuses included), or the
// gateway's own error. The HTTP routes and OpenAIService's Tokenize and Detokenize all call it,
// so the surfaces cannot drift apart.
func (e *Endpoints) Serve(ctx context.Context, path string, body []byte) (status int, answer []byte, perr *pipeline.Error) {
	if path != pathTokenize && path != pathDetokenize {
		return 0, nil, pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (POST %s)", path))
	}
	switch {
	case len(body) > maxTokenizeBody:
		return 0, nil, pipeline.TooLarge(maxTokenizeBody)
	case len(bytes.TrimSpace(body)) == 0:
		return 0, nil, pipeline.InvalidRequest("", "invalid_json", "The request body is empty: send a JSON object.")
	}
	// The model is read as the upstream's JSON decoder reads it (case-sensitive key, the last of
	// repeated ones), not as encoding/json would (any letter case): the model whose visibility
	// is checked is then the one a forwarded body names.
	rt, err := pipeline.Scan(body)
	if err != nil {
		return 0, nil, pipeline.InvalidJSON(err)
	}
	m, perr := e.model(ctx, rt.Model)
	if perr != nil {
		return 0, nil, perr
	}
	if m == nil {
		return e.forward(ctx, rt.Model, path, body)
	}
	var out any
	if path == pathTokenize {
		out, perr = m.tokenize(ctx, body)
	} else {
		out, perr = m.detokenize(body)
	}
	if perr != nil {
		return 0, nil, perr
	}
	if answer, err = json.Marshal(out); err != nil {
		return 0, nil, pipeline.ServerError(http.StatusInternalServerError, "", fmt.Sprintf("encoding the %s answer: %v", path, err))
	}
	return http.StatusOK, answer, nil
}

type tokenizeRequest struct {
	Prompt               *string         `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
}

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen *int     `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// tokenize answers a /tokenize body with the model's tokenizer.
func (m *Model) tokenize(ctx context.Context, body []byte) (*tokenizeResponse, *pipeline.Error) {
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, pipeline.InvalidJSON(err)
	}
	var ids []int
	switch {
	case req.Messages != nil && req.Prompt != nil:
		return nil, pipeline.InvalidRequest("", "invalid_request", "Give either prompt or messages, not both.")
	case req.Messages != nil:
		if req.ContinueFinalMessage {
			msg := "continue_final_message is not supported by the gateway's tokenizer."
			if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
				msg = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
			}
			return nil, pipeline.InvalidRequest("continue_final_message", "invalid_request", msg)
		}
		in, err := chattemplate.DecodeRequest(body)
		if err != nil {
			return nil, TemplateError(err)
		}
		addSpecial := req.AddSpecialTokens != nil && *req.AddSpecialTokens
		if ids, err = m.ChatTokens(ctx, in, addSpecial); err != nil {
			return nil, asError(err)
		}
	case req.Prompt != nil:
		ids = m.TextTokens(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	default:
		return nil, pipeline.InvalidRequest("prompt", "missing_required_parameter", "Give a prompt (a string) or messages.")
	}
	out := &tokenizeResponse{Count: len(ids), Tokens: ids, MaxModelLen: m.reportedMaxLen()}
	if req.ReturnTokenStrs {
		out.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			out.TokenStrs[i] = m.tok.TokenString(id)
		}
	}
	return out, nil
}

// reportedMaxLen is /tokenize's max_model_len: the configured one, else the tokenizer's
// model_max_length when it names a real length; null when neither does.
func (m *Model) reportedMaxLen() *int {
	n := m.opts.MaxModelLen
	if n <= 0 {
		n = m.tok.Config().ModelMaxLength
	}
	if n <= 0 || n >= math.MaxInt32 {
		return nil
	}
	return &n
}

// detokenize answers a /detokenize body with the model's tokenizer.
func (m *Model) detokenize(body []byte) (map[string]string, *pipeline.Error) {
	var req struct {
		Tokens *[]int64 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, pipeline.InvalidJSON(err)
	}
	if req.Tokens == nil {
		return nil, pipeline.InvalidRequest("tokens", "missing_required_parameter", "you must provide tokens (a list of token ids)")
	}
	ids := make([]int, len(*req.Tokens))
	vocab := m.tok.VocabSize()
	for i, id := range *req.Tokens {
		if id < 0 || id >= int64(vocab) {
			return nil, pipeline.InvalidRequest("tokens", "invalid_token_id",
				fmt.Sprintf("tokens[%d]: %d is not a token of model `%s` (its ids are 0 to %d).", i, id, m.name, vocab-1))
		}
		ids[i] = int(id)
	}
	return map[string]string{"prompt": m.tok.Decode(ids, false)}, nil
}

// model finds the request's model: its tokenizer, or nil for a model the caller may see but the
// gateway has no tokenizer for (forward's to answer).
func (e *Endpoints) model(ctx context.Context, name string) (*Model, *pipeline.Error) {
	if name == "" {
		return nil, pipeline.MissingModel()
	}
	// A model the caller may not see answers as one without a tokenizer or upstream, so that its
	// existence does not show.
	if e.Visible != nil && !e.Visible(ctx, name) {
		return nil, noTokenizer(name)
	}
	if m := e.Lookup(name); m != nil {
		return m, nil
	}
	if e.Forward == nil {
		return nil, noTokenizer(name)
	}
	return nil, nil
}

// forward passes a request for a model without a tokenizer on to its upstream.
func (e *Endpoints) forward(ctx context.Context, model, path string, body []byte) (int, []byte, *pipeline.Error) {
	status, answer, err := e.Forward(ctx, model, path, body)
	var perr *pipeline.Error
	switch {
	case errors.Is(err, ErrNoUpstream):
		return 0, nil, noTokenizer(model)
	case errors.As(err, &perr):
		return 0, nil, perr
	case err != nil && ctx.Err() != nil:
		return 0, nil, pipeline.Canceled(ctx.Err())
	case err != nil:
		return 0, nil, pipeline.ServerError(http.StatusBadGateway, "upstream_error",
			fmt.Sprintf("Passing %s for model `%s` on to its upstream failed: %v", path, model, err))
	case !json.Valid(answer):
		// Not vLLM's answer (a proxy's error page, or a server without the endpoint): said as
		// the gateway's error, so that a client never reads a JSON answer that is not JSON.
		return 0, nil, pipeline.ServerError(http.StatusBadGateway, "invalid_upstream_response",
			fmt.Sprintf("The upstream of model `%s` answered %s with HTTP %d and a body that is not JSON: %q",
				model, path, status, httpapi.Truncate(string(answer), 256)))
	}
	return status, answer, nil
}

// noTokenizer is the 400 for a model the gateway can neither tokenize nor forward.
func noTokenizer(name string) *pipeline.Error {
	return pipeline.InvalidRequest("model", "tokenizer_missing", fmt.Sprintf(
		"The gateway has no tokenizer for model `%s`: set models.%s.tokenizer in its config to a directory holding "+
			"the model's tokenizer.json and tokenizer_config.json.", name, name))
}

// readBody reads a bounded request body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *pipeline.Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTokenizeBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, pipeline.TooLarge(tooBig.Limit)
	case err != nil:
		return nil, pipeline.InvalidRequest("", "", "Could not read the request body: "+err.Error())
	}
	return b, nil
}

// asError is err as the gateway's answer: a *pipeline.Error as it is, anything else a 500.
func asError(err error) *pipeline.Error {
	var e *pipeline.Error
	if !errors.As(err, &e) {
		e = pipeline.ServerError(http.StatusInternalServerError, "", err.Error())
	}
	return e
}
