package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/infergate/infergate/core/pipeline"
)

// SyntaxError is a template that does not compile: a configuration error, found once at start-up
// by Compile.
type SyntaxError struct {
	Msg string
}

func (e *SyntaxError) Error() string { return "chat template: " + e.Msg }

// RaiseError is the template's own refusal of a request: its raise_exception(message). Message
// is the template's text (for example "Conversation roles must alternate
// user/assistant/user/assistant/...").
type RaiseError struct {
	Message string
}

func (e *RaiseError) Error() string { return e.Message }

// InputError is a request the chat template cannot take as sent: an unknown role, a tool that is
// not an object, a content part that is not text, a reserved chat_template_kwargs name. Param
// names the request field at fault (messages[2].role), Msg says what to change.
type InputError struct {
	Param string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

func inputErrorf(param, format string, args ...any) *InputError {
	return &InputError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// LimitError is a render stopped by one of the Limits (or a template over MaxTemplateBytes or
// MaxNesting at Compile): Limit names it, Max is its value.
type LimitError struct {
	Limit string
	Max   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("chat template exceeded %s (%d)", e.Limit, e.Max)
}

// RenderError is any other failure of a render: the engine's own error (an operation the
// template applies to a value of the wrong type, say), a panic inside the engine, or the
// context's end. Err is the cause.
type RenderError struct {
	Err error
}

func (e *RenderError) Error() string { return "chat template: " + e.Err.Error() }
func (e *RenderError) Unwrap() error { return e.Err }

// OpenAIError is the gateway's answer to a render error, OpenAI's error object with its status:
// a 400 for everything the request caused (RaiseError with the template's message, InputError,
// LimitError, RenderError), and a 500 only for a SyntaxError (a template that should not have
// been loaded) or an error this package did not make, and a 504 for the caller's context ending
// mid-render.
func OpenAIError(err error) *pipeline.Error {
	var (
		raise *RaiseError
		input *InputError
		limit *LimitError
		syn   *SyntaxError
		rend  *RenderError
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
			"The model's chat template could not render this request: "+pipeline.Truncate(rend.Err.Error(), 300))
	}
	return pipeline.ServerError(http.StatusInternalServerError, "chat_template_error", "Rendering the chat template failed.")
}
