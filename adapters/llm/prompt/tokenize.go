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

	"github.com/infergate/infergate/adapters/llm/chattemplate"
	"github.com/infergate/infergate/adapters/pipeline"
)

// maxTokenizeBody bounds a /tokenize or /detokenize body.
const maxTokenizeBody = 16 << 20

// Endpoints serves vLLM's POST /tokenize and POST /detokenize for the models Lookup knows. They
// are vLLM's shapes: /tokenize takes a completion prompt (model, prompt, add_special_tokens:
// true) or a conversation (model, messages, tools, add_generation_prompt: true,
// add_special_tokens: false, chat_template_kwargs) and answers count, max_model_len, tokens and,
// when return_token_strs, token_strs; /detokenize takes model and tokens and answers prompt.
type Endpoints struct {
	// Lookup returns the model clients call name, or nil when it has no tokenizer configured.
	Lookup func(name string) *Model
	// Visible, when set, hides the models a caller may not use (the guard's API key model
	// lists): such a model is, to that caller, one the gateway has no tokenizer for.
	Visible func(ctx context.Context, model string) bool
}

// Mount registers the routes on mux.
func (e *Endpoints) Mount(mux *http.ServeMux) {
	mux.HandleFunc("POST /tokenize", e.tokenize)
	mux.HandleFunc("POST /detokenize", e.detokenize)
}

type tokenizeRequest struct {
	Model                string          `json:"model"`
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

func (e *Endpoints) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	body, m, ok := e.start(w, r, &req, &req.Model)
	if !ok {
		return
	}
	var ids []int
	switch {
	case req.Messages != nil && req.Prompt != nil:
		pipeline.InvalidRequest("", "invalid_request", "Give either prompt or messages, not both.").Write(w)
		return
	case req.Messages != nil:
		if req.ContinueFinalMessage {
			msg := "continue_final_message is not supported by the gateway's tokenizer."
			if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
				msg = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
			}
			pipeline.InvalidRequest("continue_final_message", "invalid_request", msg).Write(w)
			return
		}
		in, err := chattemplate.DecodeRequest(body)
		if err != nil {
			chattemplate.OpenAIError(err).Write(w)
			return
		}
		addSpecial := req.AddSpecialTokens != nil && *req.AddSpecialTokens
		if ids, err = m.ChatTokens(r.Context(), in, addSpecial); err != nil {
			writeError(w, err)
			return
		}
	case req.Prompt != nil:
		ids = m.TextTokens(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	default:
		pipeline.InvalidRequest("prompt", "missing_required_parameter", "Give a prompt (a string) or messages.").Write(w)
		return
	}
	out := tokenizeResponse{Count: len(ids), Tokens: ids, MaxModelLen: m.reportedMaxLen()}
	if req.ReturnTokenStrs {
		out.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			out.TokenStrs[i] = m.tok.TokenString(id)
		}
	}
	pipeline.WriteJSON(w, http.StatusOK, out)
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

func (e *Endpoints) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string   `json:"model"`
		Tokens *[]int64 `json:"tokens"`
	}
	_, m, ok := e.start(w, r, &req, &req.Model)
	if !ok {
		return
	}
	if req.Tokens == nil {
		pipeline.InvalidRequest("tokens", "missing_required_parameter", "you must provide tokens (a list of token ids)").Write(w)
		return
	}
	ids := make([]int, len(*req.Tokens))
	vocab := m.tok.VocabSize()
	for i, id := range *req.Tokens {
		if id < 0 || id >= int64(vocab) {
			pipeline.InvalidRequest("tokens", "invalid_token_id",
				fmt.Sprintf("tokens[%d]: %d is not a token of model `%s` (its ids are 0 to %d).", i, id, m.name, vocab-1)).Write(w)
			return
		}
		ids[i] = int(id)
	}
	pipeline.WriteJSON(w, http.StatusOK, map[string]string{"prompt": m.tok.Decode(ids, false)})
}

// start reads the body into req and finds the model it names (*model, once decoded); false when
// it answered the request already.
func (e *Endpoints) start(w http.ResponseWriter, r *http.Request, req any, model *string) ([]byte, *Model, bool) {
	body, perr := readBody(w, r)
	if perr != nil {
		perr.Write(w)
		return nil, nil, false
	}
	if err := json.Unmarshal(body, req); err != nil {
		pipeline.InvalidJSON(err).Write(w)
		return nil, nil, false
	}
	m, perr := e.model(r.Context(), *model)
	if perr != nil {
		perr.Write(w)
		return nil, nil, false
	}
	return body, m, true
}

// model finds the request's model, or says why it cannot be tokenized.
func (e *Endpoints) model(ctx context.Context, name string) (*Model, *pipeline.Error) {
	if name == "" {
		return nil, pipeline.MissingModel()
	}
	var m *Model
	// A model the caller may not see answers as one without a tokenizer, so that its existence
	// does not show.
	if e.Visible == nil || e.Visible(ctx, name) {
		m = e.Lookup(name)
	}
	if m == nil {
		return nil, pipeline.InvalidRequest("model", "tokenizer_missing", fmt.Sprintf(
			"The gateway has no tokenizer for model `%s`: set models.%s.tokenizer in its config to a directory holding "+
				"the model's tokenizer.json and tokenizer_config.json.", name, name))
	}
	return m, nil
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
	case len(bytes.TrimSpace(b)) == 0:
		return nil, pipeline.InvalidRequest("", "invalid_json", "The request body is empty: send a JSON object.")
	}
	return b, nil
}

// writeError answers with a *pipeline.Error, or a 500 for anything else.
func writeError(w http.ResponseWriter, err error) {
	var e *pipeline.Error
	if !errors.As(err, &e) {
		e = pipeline.ServerError(http.StatusInternalServerError, "", err.Error())
	}
	e.Write(w)
}
