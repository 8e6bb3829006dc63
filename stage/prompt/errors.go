package prompt

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chattemplate"
)

// TemplateError is the gateway's answer to a render error of lib/chattemplate, OpenAI's error
// object with its status: a 400 for everything the request caused (a RaiseError with the
// template's own message, an InputError on its Param, a LimitError, a RenderError), a 504 for the
// caller's context ending mid-render, and a 500 only for a SyntaxError (a template that should
// not have been loaded) or an error chattemplate did not make. The mapping lives here, not in
// chattemplate, so that the template engine stays a pure library (no net/http, no pipeline).
func TemplateError(err error) *pipeline.Error {
	var (
		raise *chattemplate.RaiseError
		input *chattemplate.InputError
		limit *chattemplate.LimitError
		syn   *chattemplate.SyntaxError
		rend  *chattemplate.RenderError
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pipeline.ServerError(http.StatusGatewayTimeout, "timeout", "Rendering the chat template was cut short: "+err.Error())
	case errors.As(err, &raise):
		return pipeline.InvalidRequest("messages", "chat_template_error", raise.Message)
	case errors.As(err, &input):
		return pipeline.InvalidRequest(input.Param, "invalid_value", input.Error())
	case errors.As(err, &limit):
		return pipeline.InvalidRequest("messages", "chat_template_limit",
			fmt.Sprintf("The request is too large for the model's chat template: it exceeded %s (%d).", limit.Limit, limit.Max))
	case errors.As(err, &syn):
		return pipeline.ServerError(http.StatusInternalServerError, "chat_template_invalid", "The model's chat template is invalid.")
	case errors.As(err, &rend):
		return pipeline.InvalidRequest("messages", "chat_template_error",
			"The model's chat template could not render this request: "+httpapi.Truncate(rend.Err.Error(), 300))
	}
	return pipeline.ServerError(http.StatusInternalServerError, "chat_template_error", "Rendering the chat template failed.")
}

// ChatInput is what a chat template renders from req: read from the request's shared view (no
// second walk over the body), with the template's errors mapped by TemplateError. A body the
// view cannot parse is read from its bytes, so that the error is the template's own wording.
func ChatInput(req *pipeline.Request) (*chattemplate.Input, error) {
	var (
		in  *chattemplate.Input
		err error
	)
	if w, werr := req.Wire(); werr == nil {
		in, err = chattemplate.DecodeBody(w)
	} else {
		in, err = chattemplate.DecodeRequest(req.Body())
	}
	if err != nil {
		return nil, TemplateError(err)
	}
	return in, nil
}

// chatTextInput is ChatInput for counting: a content part that is not text (an image, audio)
// is left out rather than refused, skipped counting them, so that a multimodal request is
// checked on what the tokenizer can count (a lower bound: the model's own processor turns an
// image into tokens the gateway cannot know).
func chatTextInput(req *pipeline.Request) (in *chattemplate.Input, skipped int, err error) {
	w, werr := req.Wire()
	if werr != nil {
		in, err = chattemplate.DecodeRequest(req.Body())
	} else {
		in, skipped, err = chattemplate.DecodeBodyText(w)
	}
	if err != nil {
		return nil, 0, TemplateError(err)
	}
	return in, skipped, nil
}
