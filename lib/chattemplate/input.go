package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/infergate/infergate/lib/openaiwire"

	"github.com/ardanlabs/jinja"

	"github.com/infergate/infergate/internal/jsonwire"
)

// Input is what a chat template renders: an OpenAI chat-completion request's conversation.
// DecodeRequest fills it from a request body; a caller may also build one.
//
// The template sees the variables transformers' apply_chat_template gives it, with the messages
// as vLLM passes them (see the package doc): messages, tools (none when absent), documents (none
// when absent), add_generation_prompt, bos_token and eos_token (when set), the entries of Kwargs,
// and the functions raise_exception and strftime_now.
type Input struct {
	Messages  []Message
	Tools     []Tool
	Documents []json.RawMessage // each a JSON object: {"title": ..., "text": ...} for most templates
	// AddGenerationPrompt asks the template to open the assistant's turn.
	AddGenerationPrompt bool
	// Kwargs are the request's chat_template_kwargs: top-level variables of the template (vLLM's
	// way: {"enable_thinking": false} for Qwen3). Values are Go values (json.RawMessage keeps
	// an object's key order; a map's keys are sorted). They cannot replace the variables above.
	Kwargs map[string]any
}

// Message is one message of the conversation.
type Message struct {
	Role string // system, developer, user, assistant or tool
	// Content is the message's text; nil when it had none (an assistant's tool calls, say).
	Content *string
	// Parts is the content when it was given as a list of parts; Content is then nil.
	Parts      []ContentPart
	Name       string
	ToolCalls  []ToolCall
	ToolCallID *string
	// Reasoning is an assistant's reasoning, given as "reasoning" or "reasoning_content"; the
	// template sees it under both names (as vLLM passes it).
	Reasoning *string
}

// ContentPart is one part of a message's content. Only text parts can be rendered.
type ContentPart struct {
	Type string
	Text string
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID       string
	Type     string
	Function FunctionCall
}

// FunctionCall names the function called and its arguments, a JSON text as OpenAI sends it. The
// template gets the arguments as an object (vLLM parses them; an unparsable text becomes {}).
type FunctionCall struct {
	Name      string
	Arguments string
}

// Tool is one tool definition of the request.
type Tool struct {
	Type     string // "function"
	Function FunctionDef
}

// FunctionDef is a tool's function. The template gets {"type": ..., "function": {"name": ...,
// "description": ..., "parameters": ..., "strict": ...}} in that order, absent fields left out;
// parameters keep their key order.
type FunctionDef struct {
	Name        string
	Description *string
	Parameters  json.RawMessage // a JSON object (a JSON Schema)
	Strict      *bool
}

// Roles a message may have.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// reserved are the variables chat_template_kwargs may not set: the template's own inputs and
// functions, and what vLLM refuses (chat_template, tokenize).
var reserved = map[string]bool{
	"messages": true, "tools": true, "documents": true, "add_generation_prompt": true,
	"bos_token": true, "eos_token": true, "raise_exception": true, "strftime_now": true,
	"range": true, "namespace": true, "dict": true, "joiner": true, "cycler": true,
	"chat_template": true, "tokenize": true, "loop": true, "true": true, "false": true, "none": true,
}

// strMap rewrites the request's strings on their way into the template (RenderSegments marks
// contents and masks special tokens with it); nil leaves them alone.
type strMap struct {
	content func(s string) string // message contents and reasoning
	other   func(s string) string // every other string of the request, object keys included
	// inspect: the functions only look (they return their argument), so the request's JSON
	// values are walked rather than copied (RenderSpans' check that no special token can be
	// read in the request's text).
	inspect bool
}

func (m *strMap) text(s string) string {
	if m == nil || m.content == nil {
		return s
	}
	return m.content(s)
}

func (m *strMap) str(s string) string {
	if m == nil || m.other == nil {
		return s
	}
	return m.other(s)
}

// variables builds the template's variables for in. It runs once or twice per render
// (RenderSegments builds a second set with the contents marked), so it allocates what the
// values need and no more: parameter names for errors are formatted only on an error, dicts get
// their key lists at the right size, and strings that are always the same (roles, "text") are
// boxed once by the compiler rather than on every request.
func (t *Template) variables(in *Input, sm *strMap, ds *dictSet) (map[string]jinja.Value, error) {
	if in == nil || len(in.Messages) == 0 {
		return nil, &InputError{Param: "messages", Msg: "at least one message is required"}
	}
	vars := make(map[string]jinja.Value, len(in.Kwargs)+len(t.globals)+renderVars+4)
	for k, v := range in.Kwargs {
		if reserved[k] || strings.HasPrefix(k, "__ig_") {
			return nil, inputErrorf("chat_template_kwargs", "%q cannot be set through chat_template_kwargs (it is the chat template's own variable)", k)
		}
		jv, err := goValue(v, t.limits.MaxInputDepth)
		if err != nil {
			return nil, inputErrorf("chat_template_kwargs."+k, "%v", err)
		}
		vars[k] = mapValue(jv, sm)
	}
	msgs := make([]jinja.Value, len(in.Messages))
	keys := make(keySlab, 3*len(in.Messages)) // role, content and often one more
	for i := range in.Messages {
		m, err := t.message(&in.Messages[i], i, sm, &keys, ds)
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	vars["messages"] = jinja.NewList(msgs)
	vars["tools"] = jinja.None()
	if in.Tools != nil {
		tools := make([]jinja.Value, len(in.Tools))
		for i := range in.Tools {
			tv, err := t.tool(&in.Tools[i], i, sm)
			if err != nil {
				return nil, err
			}
			tools[i] = tv
		}
		vars["tools"] = jinja.NewList(tools)
	}
	vars["documents"] = jinja.None()
	if in.Documents != nil {
		docs := make([]jinja.Value, len(in.Documents))
		for i, d := range in.Documents {
			if !isJSONObject(d) {
				return nil, inputErrorf(fmt.Sprintf("documents[%d]", i), "a document must be a JSON object (such as {\"title\": ..., \"text\": ...})")
			}
			dv, err := jsonValue(d, t.limits.MaxInputDepth)
			if err != nil {
				return nil, inputErrorf(fmt.Sprintf("documents[%d]", i), "%v", err)
			}
			docs[i] = mapValue(dv, sm)
		}
		vars["documents"] = jinja.NewList(docs)
	}
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	for k, v := range t.globals {
		vars[k] = v
	}
	return vars, nil
}

// newDict is an empty dict with room for n keys (the engine's NewDict grows its key list by
// appending, three allocations for four keys).
func newDict(n int) (jinja.Value, *jinja.Dict) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Keys = make([]string, 0, n)
	return v, d
}

// dictSet lends the messages' dicts of one render and takes them back after it: a chat's dozens
// of messages would otherwise cost a dict and its map each, every render. Nothing holds a
// variable after the engine returns (its output is a new string), so a dict can serve the next
// render once cleared. A nil *dictSet makes new dicts.
type dictSet struct {
	all  []jinja.Value
	used int
}

// maxPooledDicts bounds the dicts a pooled set keeps, so that one request of thousands of
// messages does not pin their maps.
const maxPooledDicts = 512

func (s *dictSet) take() (jinja.Value, *jinja.Dict) {
	if s == nil {
		v := jinja.NewDict()
		return v, v.AsDict()
	}
	if s.used == len(s.all) {
		s.all = append(s.all, jinja.NewDict())
	}
	v := s.all[s.used]
	s.used++
	return v, v.AsDict()
}

// reset takes back the dicts lent so far, emptied (so that they keep no request's strings).
func (s *dictSet) reset() {
	for _, v := range s.all[:s.used] {
		d := v.AsDict()
		clear(d.Data)
		d.Keys = nil
	}
	s.used = 0
}

func (t *Template) getDicts() *dictSet {
	if s, ok := t.dicts.Get().(*dictSet); ok {
		return s
	}
	return new(dictSet)
}

func (t *Template) putDicts(s *dictSet) {
	s.reset()
	if len(s.all) <= maxPooledDicts {
		t.dicts.Put(s)
	}
}

// keySlab hands out the key lists of the messages' dicts from shared arrays: one allocation
// for a conversation's messages rather than one each.
type keySlab []string

// take returns an empty list with room for n keys.
func (k *keySlab) take(n int) []string {
	if len(*k) < n {
		*k = make(keySlab, max(n, 64))
	}
	l := (*k)[:0:n] // full: an append beyond n copies rather than writing into the next list
	*k = (*k)[n:]
	return l
}

// add sets a key the dict does not have yet: one map operation where Set makes two (it looks
// for the key first, to keep its place in the key list).
func add(d *jinja.Dict, key string, v jinja.Value) {
	d.Keys = append(d.Keys, key)
	d.Data[key] = v
}

// str is jinja.NewString for the strings a template sees on every request: a constant is boxed
// into the value without an allocation, a request's string is not.
func str(s string) jinja.Value {
	switch s {
	case "system":
		return jinja.NewString("system")
	case "developer":
		return jinja.NewString("developer")
	case "user":
		return jinja.NewString("user")
	case "assistant":
		return jinja.NewString("assistant")
	case "tool":
		return jinja.NewString("tool")
	case "function":
		return jinja.NewString("function")
	case "text":
		return jinja.NewString("text")
	case "":
		return jinja.NewString("")
	}
	return jinja.NewString(s)
}

func (t *Template) message(m *Message, i int, sm *strMap, keys *keySlab, ds *dictSet) (jinja.Value, error) {
	if !roles[m.Role] {
		return jinja.Undefined(), inputErrorf(fmt.Sprintf("messages[%d].role", i), "unknown role %q: a message's role is system, developer, user, assistant or tool", m.Role)
	}
	for j, p := range m.Parts {
		if p.Type != "text" {
			return jinja.Undefined(), inputErrorf(fmt.Sprintf("messages[%d].content[%d].type", i, j),
				"content parts of type %q are not supported: this model's chat template takes text parts only", p.Type)
		}
	}
	n := 2
	if m.Role == "assistant" {
		if len(m.ToolCalls) > 0 {
			n++
		}
		if m.Reasoning != nil {
			n += 2
		}
	}
	if m.Role == "tool" && m.ToolCallID != nil {
		n++
	}
	if m.Name != "" {
		n++
	}
	d, msg := ds.take()
	msg.Keys = keys.take(n)
	add(msg, "role", str(m.Role))
	if t.format == FormatOpenAI && m.Role != "tool" {
		var parts []jinja.Value
		switch {
		case m.Parts != nil:
			parts = make([]jinja.Value, len(m.Parts))
			for j, p := range m.Parts {
				parts[j] = textPart(sm.text(p.Text))
			}
		case m.Content != nil:
			parts = []jinja.Value{textPart(sm.text(*m.Content))}
		default:
			parts = []jinja.Value{}
		}
		add(msg, "content", jinja.NewList(parts))
	} else {
		var text string
		switch {
		case m.Parts != nil:
			texts := make([]string, len(m.Parts))
			for j, p := range m.Parts {
				texts[j] = p.Text
			}
			text = strings.Join(texts, "\n")
		case m.Content != nil:
			text = *m.Content
		}
		add(msg, "content", jinja.NewString(sm.text(text)))
	}
	if m.Role == "assistant" {
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j := range m.ToolCalls {
				cv, err := t.toolCall(&m.ToolCalls[j], i, j, sm)
				if err != nil {
					return jinja.Undefined(), err
				}
				calls[j] = cv
			}
			add(msg, "tool_calls", jinja.NewList(calls))
		}
		if m.Reasoning != nil {
			r := jinja.NewString(sm.text(*m.Reasoning))
			add(msg, "reasoning", r)
			add(msg, "reasoning_content", r)
		}
	}
	if m.Role == "tool" && m.ToolCallID != nil {
		add(msg, "tool_call_id", jinja.NewString(sm.str(*m.ToolCallID)))
	}
	if m.Name != "" {
		add(msg, "name", jinja.NewString(sm.str(m.Name)))
	}
	return d, nil
}

// textPart is {"type": "text", "text": text}.
func textPart(text string) jinja.Value {
	p, d := newDict(2)
	add(d, "type", str("text"))
	add(d, "text", jinja.NewString(text))
	return p
}

// toolCall is the j-th tool call of message i.
func (t *Template) toolCall(c *ToolCall, i, j int, sm *strMap) (jinja.Value, error) {
	param := func() string { return fmt.Sprintf("messages[%d].tool_calls[%d]", i, j) }
	if c.Function.Name == "" {
		return jinja.Undefined(), inputErrorf(param()+".function.name", "a tool call needs the name of the function it calls")
	}
	args := jinja.NewDict() // vLLM: arguments that are not JSON become {}
	if a := strings.TrimSpace(c.Function.Arguments); a != "" {
		if v, err := jsonValue([]byte(a), t.limits.MaxInputDepth); err == nil {
			args = mapValue(v, sm)
		} else if errors.Is(err, jsonwire.ErrTooDeep) {
			return jinja.Undefined(), inputErrorf(param()+".function.arguments", "%v", err)
		}
	}
	fn, fd := newDict(2)
	add(fd, "name", jinja.NewString(sm.str(c.Function.Name)))
	add(fd, "arguments", args)
	d, dd := newDict(3)
	if c.ID != "" {
		add(dd, "id", jinja.NewString(sm.str(c.ID)))
	}
	if c.Type != "" {
		add(dd, "type", str(sm.str(c.Type)))
	}
	add(dd, "function", fn)
	return d, nil
}

func (t *Template) tool(tl *Tool, i int, sm *strMap) (jinja.Value, error) {
	param := func() string { return fmt.Sprintf("tools[%d]", i) }
	if tl.Type != "function" {
		return jinja.Undefined(), inputErrorf(param()+".type", "unsupported tool type %q: only \"function\" tools can be rendered", tl.Type)
	}
	f := &tl.Function
	if f.Name == "" {
		return jinja.Undefined(), inputErrorf(param()+".function.name", "a function tool needs a name")
	}
	fn, fd := newDict(4)
	add(fd, "name", jinja.NewString(sm.str(f.Name)))
	if f.Description != nil {
		add(fd, "description", jinja.NewString(sm.str(*f.Description)))
	}
	if len(f.Parameters) > 0 && !bytes.Equal(bytes.TrimSpace(f.Parameters), []byte("null")) {
		if !isJSONObject(f.Parameters) {
			return jinja.Undefined(), inputErrorf(param()+".function.parameters", "a function's parameters must be a JSON Schema object, such as {\"type\": \"object\", \"properties\": {...}}")
		}
		pv, err := jsonValue(f.Parameters, t.limits.MaxInputDepth)
		if err != nil {
			return jinja.Undefined(), inputErrorf(param()+".function.parameters", "%v", err)
		}
		add(fd, "parameters", mapValue(pv, sm))
	}
	if f.Strict != nil {
		add(fd, "strict", jinja.NewBool(*f.Strict))
	}
	d, dd := newDict(2)
	add(dd, "type", str(tl.Type))
	add(dd, "function", fn)
	return d, nil
}

// mapValue applies sm's other to every string and key of v, in a copy (or, when sm only
// inspects, to v itself).
func mapValue(v jinja.Value, sm *strMap) jinja.Value {
	if sm == nil || sm.other == nil {
		return v
	}
	if sm.inspect {
		inspectValue(v, sm.other)
		return v
	}
	switch {
	case v.IsString():
		return jinja.NewString(sm.other(v.AsString()))
	case v.IsList():
		items := make([]jinja.Value, v.AsList().Len())
		for i, item := range v.AsList().Items {
			items[i] = mapValue(item, sm)
		}
		return jinja.NewList(items)
	case v.IsDict():
		d := v.AsDict()
		nd := jinja.NewDict()
		for _, k := range d.Keys {
			item, _ := d.Get(k)
			nd.AsDict().Set(sm.other(k), mapValue(item, sm))
		}
		return nd
	}
	return v
}

// inspectValue calls f with every string and key of v. The request's values nest at most
// Limits.MaxInputDepth deep (jsonValue and goValue refuse deeper ones), which bounds the
// recursion.
func inspectValue(v jinja.Value, f func(string) string) {
	switch {
	case v.IsString():
		f(v.AsString())
	case v.IsList():
		for _, item := range v.AsList().Items {
			inspectValue(item, f)
		}
	case v.IsDict():
		d := v.AsDict()
		for _, k := range d.Keys {
			f(k)
			inspectValue(d.Data[k], f)
		}
	}
}

func isJSONObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// DecodeRequest reads the fields of an OpenAI chat-completion request body that a chat template
// renders: messages, tools, documents, chat_template_kwargs and add_generation_prompt (vLLM's
// extension; true when absent). Anything it cannot take is an *InputError naming the field.
//
// Field names match as encoding/json matches them (in any letter case). A key repeated in one
// object is read as encoding/json reads it into a struct (no client sends one). A request is read in one pass over its bytes (decodeFast); what that pass does not take
// as is, encoding/json reads field by field (decodeChecked), to word the error.
func DecodeRequest(body []byte) (*Input, error) {
	if in := decodeFast(body); in != nil {
		return in, nil
	}
	return decodeChecked(body)
}

// DecodeBody is DecodeRequest for a body already parsed (the pipeline's shared view), as
// edited: the same Input and the same errors, read from the members' values rather than by a
// second walk over the whole body.
func DecodeBody(b *openaiwire.Body) (*Input, error) {
	if in := decodeView(b); in != nil {
		return in, nil
	}
	return decodeChecked(b.AppendJSON(nil))
}

// DecodeBodyText is DecodeBody for counting what can be counted of a multimodal request: a
// content part other than text (an image, audio, a file) is left out rather than refused, and
// skipped says how many were. What it returns renders the request's text only: its tokens are a
// lower bound of the prompt's, and no substitute for it.
func DecodeBodyText(b *openaiwire.Body) (in *Input, skipped int, err error) {
	if in := decodeView(b); in != nil {
		return in, 0, nil // the fast reader takes text parts only
	}
	d := checker{skip: true}
	in, err = d.decode(b.AppendJSON(nil))
	return in, d.skipped, err
}

// decodeChecked decodes field by field, to name the one at fault.
func decodeChecked(body []byte) (*Input, error) { return (&checker{}).decode(body) }

// checker is decodeChecked's state: whether it leaves out parts that are not text, and how many
// it did.
type checker struct {
	skip    bool
	skipped int
}

func (d *checker) decode(body []byte) (*Input, error) {
	var req struct {
		Messages            []json.RawMessage `json:"messages"`
		Tools               []json.RawMessage `json:"tools"`
		Documents           []json.RawMessage `json:"documents"`
		ChatTemplateKwargs  json.RawMessage   `json:"chat_template_kwargs"`
		AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, inputErrorf("", "the request is not a chat completion request: %v", jsonMsg(err))
	}
	in := &Input{AddGenerationPrompt: req.AddGenerationPrompt == nil || *req.AddGenerationPrompt}
	if len(req.Messages) == 0 {
		return nil, &InputError{Param: "messages", Msg: "at least one message is required"}
	}
	in.Messages = make([]Message, len(req.Messages))
	for i, raw := range req.Messages {
		if err := d.message(raw, &in.Messages[i], fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
	}
	if req.Tools != nil {
		in.Tools = make([]Tool, len(req.Tools))
		for i, raw := range req.Tools {
			if err := decodeTool(raw, &in.Tools[i], fmt.Sprintf("tools[%d]", i)); err != nil {
				return nil, err
			}
		}
	}
	if req.Documents != nil {
		for i, d := range req.Documents {
			if !isJSONObject(d) {
				return nil, inputErrorf(fmt.Sprintf("documents[%d]", i), "a document must be a JSON object (such as {\"title\": ..., \"text\": ...})")
			}
		}
		in.Documents = req.Documents
	}
	if k := bytes.TrimSpace(req.ChatTemplateKwargs); len(k) > 0 && !bytes.Equal(k, []byte("null")) {
		if !isJSONObject(k) {
			return nil, inputErrorf("chat_template_kwargs", "chat_template_kwargs must be a JSON object")
		}
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(k, &kw); err != nil {
			return nil, inputErrorf("chat_template_kwargs", "%v", jsonMsg(err))
		}
		in.Kwargs = make(map[string]any, len(kw))
		for name, v := range kw {
			in.Kwargs[name] = v
		}
	}
	return in, nil
}

func (d *checker) message(raw json.RawMessage, m *Message, param string) error {
	if !isJSONObject(raw) {
		return inputErrorf(param, "a message must be a JSON object with a role and a content")
	}
	var w struct {
		Role             *string           `json:"role"`
		Content          json.RawMessage   `json:"content"`
		Name             *string           `json:"name"`
		ToolCalls        []json.RawMessage `json:"tool_calls"`
		ToolCallID       *string           `json:"tool_call_id"`
		Reasoning        *string           `json:"reasoning"`
		ReasoningContent *string           `json:"reasoning_content"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return inputErrorf(param, "%v", jsonMsg(err))
	}
	if w.Role == nil {
		return inputErrorf(param+".role", "a message needs a role: system, developer, user, assistant or tool")
	}
	m.Role = *w.Role
	if !roles[m.Role] {
		return inputErrorf(param+".role", "unknown role %q: a message's role is system, developer, user, assistant or tool", m.Role)
	}
	content := bytes.TrimSpace(w.Content)
	switch {
	case len(content) == 0 || bytes.Equal(content, []byte("null")):
	case content[0] == '"':
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return inputErrorf(param+".content", "%v", jsonMsg(err))
		}
		m.Content = &s
	case content[0] == '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(content, &parts); err != nil {
			return inputErrorf(param+".content", "%v", jsonMsg(err))
		}
		m.Parts = make([]ContentPart, 0, len(parts))
		for j, p := range parts {
			pp := fmt.Sprintf("%s.content[%d]", param, j)
			var part struct {
				Type *string `json:"type"`
				Text *string `json:"text"`
			}
			if !isJSONObject(p) {
				return inputErrorf(pp, "a content part must be an object such as {\"type\": \"text\", \"text\": ...}")
			}
			if err := json.Unmarshal(p, &part); err != nil {
				return inputErrorf(pp, "%v", jsonMsg(err))
			}
			if part.Type == nil {
				return inputErrorf(pp+".type", "a content part needs a type")
			}
			if *part.Type != "text" && d.skip {
				d.skipped++
				continue
			}
			if *part.Type != "text" {
				return inputErrorf(pp+".type", "content parts of type %q are not supported: this model's chat template takes text parts only", *part.Type)
			}
			if part.Text == nil {
				return inputErrorf(pp+".text", "a text part needs its text")
			}
			m.Parts = append(m.Parts, ContentPart{Type: "text", Text: *part.Text})
		}
	default:
		return inputErrorf(param+".content", "a message's content must be a string, a list of text parts or null")
	}
	if m.Content == nil && m.Parts == nil && m.Role != "assistant" {
		return inputErrorf(param+".content", "a %s message needs a content", m.Role)
	}
	if w.Name != nil {
		m.Name = *w.Name
	}
	m.ToolCallID = w.ToolCallID
	m.Reasoning = w.Reasoning
	if m.Reasoning == nil {
		m.Reasoning = w.ReasoningContent
	}
	if len(w.ToolCalls) > 0 {
		m.ToolCalls = make([]ToolCall, len(w.ToolCalls))
		for j, raw := range w.ToolCalls {
			cp := fmt.Sprintf("%s.tool_calls[%d]", param, j)
			if !isJSONObject(raw) {
				return inputErrorf(cp, "a tool call must be an object with an id, a type and a function")
			}
			var c struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function *struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				return inputErrorf(cp, "%v", jsonMsg(err))
			}
			if c.Function == nil || c.Function.Name == "" {
				return inputErrorf(cp+".function.name", "a tool call needs the name of the function it calls")
			}
			tc := ToolCall{ID: c.ID, Type: c.Type, Function: FunctionCall{Name: c.Function.Name}}
			args := bytes.TrimSpace(c.Function.Arguments)
			switch {
			case len(args) > 0 && args[0] == '"':
				if err := json.Unmarshal(args, &tc.Function.Arguments); err != nil {
					return inputErrorf(cp+".function.arguments", "%v", jsonMsg(err))
				}
			case len(args) > 0 && (args[0] == '{' || args[0] == '['):
				tc.Function.Arguments = string(args) // some clients send the object itself
			}
			m.ToolCalls[j] = tc
		}
	}
	return nil
}

func decodeTool(raw json.RawMessage, t *Tool, param string) error {
	if !isJSONObject(raw) {
		return inputErrorf(param, "a tool must be a JSON object such as {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}")
	}
	var w struct {
		Type     string          `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return inputErrorf(param, "%v", jsonMsg(err))
	}
	if w.Type != "function" {
		return inputErrorf(param+".type", "unsupported tool type %q: only \"function\" tools can be rendered", w.Type)
	}
	if !isJSONObject(w.Function) {
		return inputErrorf(param+".function", "a function tool needs a function object with a name")
	}
	var f struct {
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(w.Function, &f); err != nil {
		return inputErrorf(param+".function", "%v", jsonMsg(err))
	}
	if f.Name == nil || *f.Name == "" {
		return inputErrorf(param+".function.name", "a function tool needs a name")
	}
	if p := bytes.TrimSpace(f.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) && !isJSONObject(p) {
		return inputErrorf(param+".function.parameters", "a function's parameters must be a JSON Schema object, such as {\"type\": \"object\", \"properties\": {...}}")
	}
	t.Type = w.Type
	t.Function = FunctionDef{Name: *f.Name, Description: f.Description, Parameters: f.Parameters, Strict: f.Strict}
	return nil
}

// jsonMsg words a decoding error for a client: which field, which type it should have been.
func jsonMsg(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be of type %s, not %s", te.Field, goTypeName(te.Type.String()), te.Value)
		}
		return fmt.Sprintf("expected %s, got %s", goTypeName(te.Type.String()), te.Value)
	}
	return err.Error()
}

func goTypeName(t string) string {
	switch {
	case strings.Contains(t, "string"):
		return "string"
	case strings.Contains(t, "bool"):
		return "boolean"
	case strings.HasPrefix(t, "[]"):
		return "array"
	case strings.Contains(t, "struct"), strings.HasPrefix(t, "map"):
		return "object"
	}
	return t
}

// unquote reads a JSON string literal already checked (by encoding/json or by the fast reader),
// as encoding/json does (invalid UTF-8 and lone surrogates become U+FFFD).
func unquote(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	s, err := jsonwire.UnescapeString(b[1:len(b)-1], jsonwire.ReplaceInvalid)
	return s, err == nil
}
