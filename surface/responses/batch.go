package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/responsestate"
)

// Caller sends one request through the gateway's routing, guard and metrics, as the Batch API's
// workers do: *openai.Proxy is one.
type Caller interface {
	Call(ctx context.Context, path string, body []byte) (*pipeline.Response, error)
}

// NewBatchCaller returns a Caller for the Batch API's workers that serves /v1/responses lines
// by translation onto next's /v1/chat/completions (a batch runs at batch priority through the
// chat pipeline), with the state opts names (its Store, Owner, Metrics, Logger and Now; the
// rest is not used): previous_response_id continues a stored response of the batch's owner,
// and a line's response is stored unless it says store false. Every other path goes to next
// unchanged. Give it the Store the HTTP route has, so that each sees the other's responses.
func NewBatchCaller(next Caller, opts Options) Caller {
	return batchCaller{h: newHandler(opts), next: next}
}

type batchCaller struct {
	h    *Handler
	next Caller
}

func (c batchCaller) Call(ctx context.Context, path string, body []byte) (*pipeline.Response, error) {
	if path != apiPath {
		return c.next.Call(ctx, path, body)
	}
	h := c.h
	t := &turn{r: nil, body: body, start: h.opts.Now(), id: newResponseID(), owner: h.opts.Owner(ctx)}
	var err error
	if t.view, err = openaiwire.Parse(body); err != nil {
		return nil, pipeline.InvalidRequest("", "invalid_json", "The body is not a JSON object: "+err.Error())
	}
	t.readView()
	if v, ok := t.view.Get("background"); ok && string(v) == "true" {
		return nil, pipeline.InvalidRequest("background", "unsupported_value", "A batch line cannot run in the background: the batch is.")
	}
	if err := h.loadContext(ctx, t); err != nil {
		return nil, pipelineError(err)
	}
	chat, meta, err := t.translated()
	if err != nil {
		return nil, pipelineError(err)
	}
	res, err := c.next.Call(ctx, "/v1/chat/completions", chat)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK || res.Stream {
		return res, nil // the chat pipeline's own error answer, in OpenAI's shape
	}
	answer, err := io.ReadAll(io.LimitReader(res, maxAnswer+1))
	usage := res.Body.Finish(nil)
	if err != nil {
		return nil, fmt.Errorf("responses: reading the chat answer: %w", err)
	}
	if len(answer) > maxAnswer {
		return nil, pipeline.ServerError(http.StatusBadGateway, "response_too_large", fmt.Sprintf("The upstream's answer is over %d bytes.", maxAnswer))
	}
	meta.CompletedAt = h.opts.Now().Unix()
	resp, err := openaiwire.ChatToResponse(answer, meta)
	if err != nil {
		return nil, pipeline.ServerError(http.StatusBadGateway, "bad_upstream_answer", "The upstream's answer could not be read: "+err.Error())
	}
	h.save(ctx, t, resp)
	out := *res
	out.Header = res.Header.Clone()
	out.Header.Del("Content-Length")
	out.Body = pipeline.NewBody(resp, usage)
	return &out, nil
}

// loadContext reads the conversation t continues (its previous_response_id's) into t.context:
// an error the client must see otherwise (previousNotFound, storeDown).
func (h *Handler) loadContext(ctx context.Context, t *turn) error {
	if t.prevID == "" {
		return nil
	}
	rec, err := h.store.Get(ctx, t.owner, t.prevID)
	switch {
	case errors.Is(err, responsestate.ErrNotFound):
		return previousNotFound(t.prevID)
	case err != nil:
		h.log.Warn("responses: reading the store failed", "id", t.prevID, "err", err)
		return storeDown(err)
	}
	out, err := outputItems(rec.Response)
	if err != nil {
		h.log.Warn("responses: a stored response has no output", "id", t.prevID, "err", err)
		return previousNotFound(t.prevID)
	}
	t.context = make([]json.RawMessage, 0, len(rec.Context)+len(rec.Input)+len(out))
	t.context = append(append(t.context, rec.Context...), rec.Input...)
	for _, o := range out {
		t.context = append(t.context, json.RawMessage(o))
	}
	return nil
}

// pipelineError is an error of this package as the pipeline's callers read errors.
func pipelineError(err error) error {
	var (
		ae *apiError
		re *openaiwire.ResponsesError
	)
	switch {
	case errors.As(err, &ae):
		return &pipeline.Error{Status: ae.status, Type: ae.Type, Param: ae.Param, Code: ae.Code, Message: ae.Message}
	case errors.As(err, &re):
		return &pipeline.Error{Status: http.StatusBadRequest, Type: re.Type, Param: re.Param, Code: re.Code, Message: re.Message}
	}
	return err
}
