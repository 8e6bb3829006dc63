package prompt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/infergate/infergate/lib/chattemplate"
)

// TestTemplateError: each of chattemplate's errors becomes the status, type, param and code a
// client sees; only the gateway's own faults are 5xx.
func TestTemplateError(t *testing.T) {
	for _, c := range []struct {
		err              error
		status           int
		typ, param, code string
		message          string
	}{
		{&chattemplate.RaiseError{Message: "Conversation roles must alternate"}, 400, "invalid_request_error", "messages", "chat_template_error", "Conversation roles must alternate"},
		{&chattemplate.InputError{Param: "messages[2].role", Msg: "unknown role"}, 400, "invalid_request_error", "messages[2].role", "invalid_value", "messages[2].role: unknown role"},
		{&chattemplate.LimitError{Limit: "MaxOutputBytes", Max: 10}, 400, "invalid_request_error", "messages", "chat_template_limit", "The request is too large for the model's chat template: it exceeded MaxOutputBytes (10)."},
		{&chattemplate.RenderError{Err: errors.New("bad type")}, 400, "invalid_request_error", "messages", "chat_template_error", "The model's chat template could not render this request: bad type"},
		{fmt.Errorf("render: %w", context.Canceled), http.StatusGatewayTimeout, "server_error", "", "timeout", "Rendering the chat template was cut short: render: context canceled"},
		{&chattemplate.SyntaxError{Msg: "bad"}, 500, "server_error", "", "chat_template_invalid", "The model's chat template is invalid."},
		{errors.New("other"), 500, "server_error", "", "chat_template_error", "Rendering the chat template failed."},
	} {
		got := TemplateError(c.err)
		if assert.NotNil(t, got, "%v", c.err) {
			assert.Equal(t, c.status, got.Status, "%v", c.err)
			assert.Equal(t, c.typ, got.Type, "%v", c.err)
			assert.Equal(t, c.param, got.Param, "%v", c.err)
			assert.Equal(t, c.code, got.Code, "%v", c.err)
			assert.Equal(t, c.message, got.Message, "%v", c.err)
		}
	}
	assert.Nil(t, TemplateError(nil))
}
