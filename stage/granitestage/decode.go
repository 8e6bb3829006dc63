package granitestage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
)

// notParams are the chat request's members that are not completion parameters: the
// conversation and what only the prompt or the chat answer uses (they are rendered, or
// answered here), and the members the upstream request sets itself.
var notParams = map[string]bool{
	"model": true, "prompt": true, "stream": true, "stream_options": true,
	"messages": true, "tools": true, "tool_choice": true, "parallel_tool_calls": true,
	"functions": true, "function_call": true, "documents": true, "controls": true,
	"thinking": true, "sanitize": true, "chat_template": true, "chat_template_kwargs": true,
	"add_generation_prompt": true, "continue_final_message": true, "add_special_tokens": true,
	"max_completion_tokens": true, "logprobs": true, "top_logprobs": true,
	"reasoning_effort": true, "modalities": true, "audio": true, "prediction": true,
	"web_search_options": true, "store": true, "metadata": true, "mm_processor_kwargs": true,
	"echo": true, "suffix": true, "best_of": true, "response_format": true,
}

// granite's controls, read from the body's top level or, as vLLM's chat API passes them to
// the template, from chat_template_kwargs; the top level wins where both name one.
var controlKeys = []string{"documents", "controls", "thinking", "sanitize"}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string                      `json:"type"`
	Function *granite.FunctionDefinition `json:"function"`
	// A flat definition ({"name":...}), as granite-io's own inputs carry it.
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// decode reads a chat completion request's members into Granite's ChatRequest. Errors are
// *pipeline.Error 400s naming the member at fault.
func decode(f map[string]json.RawMessage) (*granite.ChatRequest, error) {
	for _, k := range []string{"logprobs", "top_logprobs"} {
		if raw, ok := f[k]; ok && !isNull(raw) && string(raw) != "false" && string(raw) != "0" {
			return nil, pipeline.InvalidRequest(k, "unsupported_parameter",
				k+" is not supported for a model served through a Granite processor: the gateway does not map completion logprobs to chat logprobs.")
		}
	}
	if raw := f["continue_final_message"]; string(raw) == "true" {
		return nil, pipeline.InvalidRequest("continue_final_message", "unsupported_parameter",
			"continue_final_message is not supported for a model served through a Granite processor: its prompt always opens a new assistant turn.")
	}
	req := &granite.ChatRequest{}
	msgs, ok := scanMessages(f["messages"])
	if !ok {
		msgs = nil
		if err := strictField(f, "messages", &msgs); err != nil {
			return nil, err
		}
	}
	if len(msgs) == 0 {
		return nil, pipeline.InvalidRequest("messages", "invalid_value", "messages must be a non-empty list.")
	}
	if len(msgs) > granite.MaxMessages {
		return nil, pipeline.InvalidRequest("messages", "too_many_messages", fmt.Sprintf("messages has more than %d entries.", granite.MaxMessages))
	}
	req.Messages = make([]granite.Message, len(msgs))
	for i, m := range msgs {
		out, err := message(i, m)
		if err != nil {
			return nil, err
		}
		req.Messages[i] = out
	}
	var tools []wireTool
	if err := strictField(f, "tools", &tools); err != nil {
		return nil, err
	}
	if len(tools) > granite.MaxTools {
		return nil, pipeline.InvalidRequest("tools", "too_many_tools", fmt.Sprintf("tools has more than %d entries.", granite.MaxTools))
	}
	for i, t := range tools {
		switch {
		case t.Function != nil:
			if t.Type != "" && t.Type != "function" {
				return nil, pipeline.InvalidRequest(fmt.Sprintf("tools[%d].type", i), "invalid_value", "Only tools of type function are supported.")
			}
			req.Tools = append(req.Tools, *t.Function)
		case t.Name != "":
			req.Tools = append(req.Tools, granite.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		default:
			return nil, pipeline.InvalidRequest(fmt.Sprintf("tools[%d]", i), "invalid_value", "A tool must be {\"type\":\"function\",\"function\":{\"name\":...}}.")
		}
		if p := req.Tools[i].Parameters; isNull(p) {
			req.Tools[i].Parameters = nil
		}
	}

	controls, err := controlFields(f)
	if err != nil {
		return nil, err
	}
	if req.Documents, ok = scanDocuments(controls["documents"]); !ok {
		req.Documents = nil
		if err := strictField(controls, "documents", &req.Documents); err != nil {
			return nil, err
		}
	}
	if len(req.Documents) > granite.MaxDocuments {
		return nil, pipeline.InvalidRequest("documents", "too_many_documents", fmt.Sprintf("documents has more than %d entries.", granite.MaxDocuments))
	}
	if raw, ok := controls["controls"]; ok && !isNull(raw) {
		if req.Controls, ok = scanControls(raw); !ok {
			req.Controls = &granite.Controls{}
			if err := strictField(controls, "controls", req.Controls); err != nil {
				return nil, err
			}
		}
	}
	if err := strictField(controls, "thinking", &req.Thinking); err != nil {
		return nil, err
	}
	if err := strictField(controls, "sanitize", &req.Sanitize); err != nil {
		return nil, err
	}

	req.Params = map[string]any{}
	for k, v := range f {
		if !notParams[k] && !isNull(v) {
			req.Params[k] = v
		}
	}
	if raw := f["max_completion_tokens"]; len(raw) > 0 && !isNull(raw) {
		req.Params["max_tokens"] = raw
	}
	return req, nil
}

// controlFields are granite's control members: chat_template_kwargs' under the top level's.
func controlFields(f map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if raw, ok := f["chat_template_kwargs"]; ok && !isNull(raw) {
		kw, ok := scanFields(raw)
		if !ok {
			kw = nil
			if err := json.Unmarshal(raw, &kw); err != nil {
				return nil, pipeline.InvalidRequest("chat_template_kwargs", "invalid_type", "chat_template_kwargs must be an object.")
			}
		}
		for _, k := range controlKeys {
			if v, ok := kw[k]; ok {
				out[k] = v
			}
		}
	}
	for _, k := range controlKeys {
		if v, ok := f[k]; ok && !isNull(v) {
			out[k] = v
		}
	}
	return out, nil
}

func message(i int, m wireMessage) (granite.Message, error) {
	param := fmt.Sprintf("messages[%d]", i)
	role := m.Role
	if role == "developer" { // OpenAI's newer name for the system turn
		role = granite.RoleSystem
	}
	switch role {
	case granite.RoleSystem, granite.RoleUser, granite.RoleAssistant, granite.RoleTool:
	default:
		return granite.Message{}, pipeline.InvalidRequest(param+".role", "invalid_value",
			fmt.Sprintf("%s.role must be system, user, assistant or tool, not %q.", param, httpapi.Truncate(m.Role, 64)))
	}
	out := granite.Message{Role: role, ToolCallID: m.ToolCallID}
	content, err := text(m.Content)
	if err != nil {
		return out, pipeline.InvalidRequest(param+".content", "invalid_type", param+".content must be a string, null, or a list of text parts.")
	}
	out.Content = content
	for j, tc := range m.ToolCalls {
		args := json.RawMessage(tc.Function.Arguments)
		if !json.Valid(args) {
			// Not rendered (Granite's template drops assistant tool calls): kept as the string.
			args, _ = json.Marshal(tc.Function.Arguments)
		}
		if tc.Function.Name == "" {
			return out, pipeline.InvalidRequest(fmt.Sprintf("%s.tool_calls[%d].function.name", param, j), "invalid_value", "A tool call must name its function.")
		}
		out.ToolCalls = append(out.ToolCalls, granite.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	return out, nil
}

// text is a message's content: a string, null, or OpenAI's list of parts, of which only text
// parts are supported (Granite 3.x reads text).
func text(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		sc := newScan(raw)
		if s, ok := sc.str(); ok && sc.end() {
			return s, nil
		}
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("a %q part", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// strictField decodes f[key] into v, when present and not null; a value of the wrong shape is
// a 400 naming key.
func strictField(f map[string]json.RawMessage, key string, v any) error {
	raw, ok := f[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return pipeline.InvalidRequest(key, "invalid_type", fmt.Sprintf("%s could not be read: %s", key, httpapi.Truncate(err.Error(), 200)))
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
