package chattemplate

import (
	"fmt"
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
