package granite

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Version is a Granite prompt format.
type Version int

// The supported formats.
const (
	V32 Version = iota + 1 // Granite 3.2
	V33                    // Granite 3.3
)

func (v Version) String() string {
	switch v {
	case V32:
		return "Granite 3.2"
	case V33:
		return "Granite 3.3"
	}
	return "Granite ?"
}

// Prompt text. Written out from the models' chat templates; a byte here changes what the model
// was fine-tuned on, so the golden tests pin every one.
const (
	tokStartRole = "<|start_of_role|>"
	tokEndRole   = "<|end_of_role|>"
	tokEndText   = "<|end_of_text|>"

	sysDateHead = "Knowledge Cutoff Date: April 2024.\nToday's Date: "
	sysDateTail = ".\nYou are Granite, developed by IBM."

	toolsPart32 = " You are a helpful AI assistant with access to the following tools. When a tool is " +
		"required to answer the user's query, respond with <|tool_call|> followed by a JSON " +
		"list of tools used. If a tool does not exist in the provided list of tools, notify the " +
		"user that you do not have the ability to fulfill the request."
	toolsPart33 = " You are a helpful assistant with access to the following tools. When a tool is " +
		"required to answer the user's query, respond only with <|tool_call|> followed by a JSON " +
		"list of tools used. If a tool does not exist in the provided list of tools, notify the " +
		"user that you do not have the ability to fulfill the request."
	// granite-io's own 3.2 constant lacks the leading space ("IBM.Write"); the model's
	// template, granite-common and 3.3 have it. We follow the template.
	docsPart = " Write the response to the user's input by strictly aligning with the facts in the " +
		"provided documents. If the information needed to answer the question is not available " +
		"in the documents, inform the user that the question cannot be answered based on the " +
		"available data."
	thinkingHead = " You are a helpful AI assistant.\nRespond to every user query in a comprehensive " +
		"and detailed way. You can write down your thoughts and reasoning process before " +
		"responding. In the thought process, engage in a comprehensive cycle of analysis, " +
		"summarization, exploration, reassessment, reflection, backtracing, and iteration to " +
		"develop well-considered thinking process. In the response section, based on various " +
		"attempts, explorations, and reflections from the thoughts section, systematically " +
		"present the final solution that you deem correct. The response should summarize the " +
		"thought process. Write your thoughts "
	thinkingTail32 = "after 'Here is my thought process:' and write your response after 'Here is my response:' for each user query."
	thinkingTail33 = "between <think></think> and write your response between <response></response> for each user query."
	plainPart      = " You are a helpful AI assistant."

	citations32 = "\n\nIn your response, use the symbols <co> and </co> to indicate when a fact comes " +
		"from a document in the search result, e.g <co>0</co> for a fact from document 0. " +
		"Afterwards, list all the citations with their corresponding documents in an ordered list."
	citations33 = " \nUse the symbols <|start_of_cite|> and <|end_of_cite|> to indicate when a fact " +
		"comes from a document in the search result, e.g <start_of_cite> {document_id: 1}my fact " +
		"<end_of_cite> for a fact from document 1. Afterwards, list all the citations with their " +
		"corresponding documents in an ordered list."
	hallucinations32 = "\n\nFinally, after the response is written, include a numbered list of sentences " +
		"from the response that are potentially hallucinated and not based in the documents."
	hallucinations33 = " \nFinally, after the response is written, include a numbered list of sentences " +
		"from the response with a corresponding risk value that are hallucinated and not based " +
		"in the documents."
)

// Special tokens each version strips under Sanitize.
var (
	specialTokens32 = []string{tokEndText, tokStartRole, tokEndRole, "<|tool_call|>"}
	specialTokens33 = []string{tokEndText, tokStartRole, tokEndRole, "<|tool_call|>",
		"<|start_of_cite|>", "<|end_of_cite|>", "<|start_of_plugin|>", "<|end_of_plugin|>"}

	// Greedy, single-line (Python's "." does not cross newlines either).
	reSanRole   = regexp.MustCompile(`<\|start_of_role\|>.*<\|end_of_role\|>.*<\|end_of_text\|>`)
	reSanTool   = regexp.MustCompile(`<\|tool_call\|>\{.*\}`)
	reSanCite   = regexp.MustCompile(`<\|start_of_cite\|>.*<\|end_of_cite\|>`)
	reSanPlugin = regexp.MustCompile(`<\|start_of_plugin\|>.*<\|end_of_plugin\|>`)
)

// Render turns a chat request into the prompt string the model was trained on
// (granite-io's InputProcessor.transform). addGenerationPrompt appends the assistant header
// the model completes. Render does not modify req. Errors are *ValidationError.
func (p *Processor) Render(req *ChatRequest, addGenerationPrompt bool) (string, error) {
	msgs, docs, tools, err := p.validate(req)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(p.sizeHint(msgs, docs, tools))

	loop := msgs
	if msgs[0].Role == RoleSystem {
		if err := customSystemAllowed(req, len(docs)); err != nil {
			return "", err
		}
		b.WriteString(tokStartRole + "system" + tokEndRole)
		b.WriteString(msgs[0].Content)
		b.WriteString(tokEndText + "\n")
		loop = msgs[1:]
	} else if err := p.defaultSystem(&b, req, len(docs) > 0, len(tools) > 0); err != nil {
		return "", err
	}

	if len(tools) > 0 {
		if p.version == V32 {
			b.WriteString(tokStartRole + "tools" + tokEndRole)
		} else {
			b.WriteString(tokStartRole + "available_tools" + tokEndRole)
		}
		if err := writeTools(&b, tools); err != nil {
			return "", invalid("tools", "%v", err)
		}
		b.WriteString(tokEndText + "\n")
	}

	if len(docs) > 0 {
		if p.version == V32 {
			b.WriteString(tokStartRole + "documents" + tokEndRole)
			for i, d := range docs {
				if i > 0 {
					b.WriteString("\n\n")
				}
				b.WriteString("Document ")
				b.WriteString(strconv.Itoa(i))
				b.WriteByte('\n')
				b.WriteString(d.Text)
			}
			b.WriteString(tokEndText + "\n")
		} else {
			for _, d := range docs {
				b.WriteString(tokStartRole + `document {"document_id": "`)
				b.WriteString(d.DocID.S)
				b.WriteString(`"}` + tokEndRole + "\n")
				b.WriteString(d.Text)
				b.WriteString(tokEndText + "\n")
			}
		}
	}

	for _, m := range loop {
		b.WriteString(tokStartRole)
		b.WriteString(m.Role)
		b.WriteString(tokEndRole)
		b.WriteString(m.Content)
		b.WriteString(tokEndText + "\n")
	}

	if addGenerationPrompt {
		b.WriteString(tokStartRole + "assistant")
		writeControls(&b, req.Controls)
		b.WriteString(tokEndRole)
	}
	return b.String(), nil
}

func (p *Processor) sizeHint(msgs []Message, docs []Document, tools []FunctionDefinition) int {
	n := 1024
	for _, m := range msgs {
		n += len(m.Content) + 48
	}
	for _, d := range docs {
		n += len(d.Text) + 64
	}
	for _, t := range tools {
		n += 2*len(t.Parameters) + 128
	}
	return n
}

// validate checks req as granite-io's Granite3Point{2,3}Inputs do and returns the messages,
// documents and tools to render, sanitized when asked (copies; req is left alone).
func (p *Processor) validate(req *ChatRequest) ([]Message, []Document, []FunctionDefinition, error) {
	if req == nil || len(req.Messages) == 0 {
		return nil, nil, nil, invalid("no_messages", "no messages; model behavior for this case is not defined")
	}
	if len(req.Messages) > MaxMessages {
		return nil, nil, nil, invalid("too_many_messages", "%d messages, at most %d", len(req.Messages), MaxMessages)
	}
	if len(req.Documents) > MaxDocuments {
		return nil, nil, nil, invalid("too_many_documents", "%d documents, at most %d", len(req.Documents), MaxDocuments)
	}
	if len(req.Tools) > MaxTools {
		return nil, nil, nil, invalid("too_many_tools", "%d tools, at most %d", len(req.Tools), MaxTools)
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleUser, RoleAssistant, RoleTool:
		case RoleSystem:
			if i > 0 {
				return nil, nil, nil, invalid("system_not_first", "message %d is a system message; only the first message may be one", i)
			}
		default:
			return nil, nil, nil, invalid("bad_role", "message %d has role %q", i, m.Role)
		}
	}
	first := 0
	if req.Messages[0].Role == RoleSystem {
		if len(req.Messages) == 1 {
			return nil, nil, nil, invalid("only_system_message", "input contains only a system message; model behavior for this case is not defined")
		}
		first = 1
	}
	if req.Messages[first].Role == RoleTool {
		return nil, nil, nil, invalid("tool_message_first", "the first message after any system message must be a user or assistant message, not a tool message")
	}
	if c := req.Controls; c != nil {
		if c.Length != nil && *c.Length != "short" && *c.Length != "long" {
			return nil, nil, nil, invalid("controls_length", `length (%s) must be "short" or "long" or None`, *c.Length)
		}
		if c.Originality != nil && *c.Originality != "extractive" && *c.Originality != "abstractive" {
			return nil, nil, nil, invalid("controls_originality", `originality (%s) must be "extractive" or "abstractive" or None`, *c.Originality)
		}
	}
	switch req.Sanitize {
	case "", "inputs", "aggressive":
	default:
		return nil, nil, nil, invalid("sanitize", `sanitize (%s) must be "inputs" or "aggressive" or None`, req.Sanitize)
	}
	for i, d := range req.Documents {
		if p.version == V32 && d.DocID != nil {
			return nil, nil, nil, invalid("doc_id_not_allowed", "document at position %d contains a `doc_id` field; this field is not allowed for Granite 3.2", i)
		}
		if p.version == V33 && d.DocID == nil {
			return nil, nil, nil, invalid("doc_id_required", "document at position %d lacks a `doc_id` field; this field is required for Granite 3.3", i)
		}
	}
	for i, t := range req.Tools {
		if len(t.Parameters) > 0 && !json.Valid(t.Parameters) {
			return nil, nil, nil, invalid("tools", "tool %d: parameters are not valid JSON", i)
		}
	}

	msgs, docs, tools := req.Messages, req.Documents, req.Tools
	if req.Sanitize == "" {
		return msgs, docs, tools, nil
	}
	msgs = append([]Message(nil), msgs...)
	for i := range msgs {
		msgs[i].Content = p.removeSpecialTokens(msgs[i].Content)
	}
	if req.Sanitize == "aggressive" {
		docs = append([]Document(nil), docs...)
		for i := range docs {
			docs[i].Text = p.removeSpecialTokens(docs[i].Text)
			if p.version == V33 && docs[i].DocID != nil && !docs[i].DocID.IsInt {
				docs[i].DocID = &DocID{S: p.removeSpecialTokens(docs[i].DocID.S)}
			}
		}
		tools = append([]FunctionDefinition(nil), tools...)
		for i := range tools {
			t, err := p.sanitizeTool(tools[i])
			if err != nil {
				return nil, nil, nil, invalid("tools", "tool %d: %v", i, err)
			}
			tools[i] = t
		}
	}
	return msgs, docs, tools, nil
}

func customSystemAllowed(req *ChatRequest, ndocs int) error {
	if req.Thinking {
		return invalid("thinking_with_custom_system", "'thinking' flag is set, but the model input includes a custom system message; Granite only supports the 'thinking' flag when the default system message is used")
	}
	if ndocs > 0 {
		return invalid("documents_with_custom_system", "the model input includes documents and a custom system message; Granite only supports the documents list when the default system message is used")
	}
	if c := req.Controls; c != nil && c.Citations {
		return invalid("citations_with_custom_system", "'citations' flag is set, but the model input includes a custom system message; Granite only supports the 'citations' flag when the default system message is used")
	}
	if c := req.Controls; c != nil && c.Hallucinations {
		return invalid("hallucinations_with_custom_system", "'hallucinations' flag is set, but the model input includes a custom system message; Granite only supports the 'hallucinations' flag when the default system message is used")
	}
	return nil
}

func (p *Processor) defaultSystem(b *strings.Builder, req *ChatRequest, haveDocs, haveTools bool) error {
	if req.Thinking && haveDocs {
		return invalid("thinking_with_documents", "'thinking' flag is set, but documents were provided; %s only supports the 'thinking' flag when documents are not provided", p.version)
	}
	if req.Thinking && haveTools {
		return invalid("thinking_with_tools", "'thinking' flag is set, but tools were provided; %s only supports the 'thinking' flag when tools are not provided", p.version)
	}
	if c := req.Controls; c != nil && c.Hallucinations && !haveDocs {
		return invalid("hallucinations_without_documents", "'hallucinations' flag is set, but the model input does not include documents; %s only supports the 'hallucinations' flag when documents are provided", p.version)
	}
	b.WriteString(tokStartRole + "system" + tokEndRole + sysDateHead)
	b.WriteString(p.now().Format("January 02, 2006"))
	b.WriteString(sysDateTail)
	v32 := p.version == V32
	switch {
	case haveDocs && haveTools:
		if v32 {
			b.WriteString(toolsPart32)
		} else {
			b.WriteString(toolsPart33)
		}
		b.WriteString("\n\n")
		b.WriteString(docsPart[1:])
	case haveDocs:
		b.WriteString(docsPart)
	case haveTools:
		if v32 {
			b.WriteString(toolsPart32)
		} else {
			b.WriteString(toolsPart33)
		}
	case req.Thinking:
		b.WriteString(thinkingHead)
		if v32 {
			b.WriteString(thinkingTail32)
		} else {
			b.WriteString(thinkingTail33)
		}
	default:
		b.WriteString(plainPart)
	}
	if c := req.Controls; c != nil && haveDocs {
		// Citations without documents are silently ignored, as the template does.
		if c.Citations {
			if v32 {
				b.WriteString(citations32)
			} else {
				b.WriteString(citations33)
			}
		}
		if c.Hallucinations {
			if v32 {
				b.WriteString(hallucinations32)
			} else {
				b.WriteString(hallucinations33)
			}
		}
	}
	b.WriteString(tokEndText + "\n")
	return nil
}

// writeControls writes " " + Python's json.dumps of the controls record, or nothing.
func writeControls(b *strings.Builder, c *Controls) {
	if c == nil || (!c.Citations && !c.Hallucinations && c.Length == nil && c.Originality == nil) {
		return
	}
	b.WriteString(" {")
	sep := ""
	if c.Citations {
		b.WriteString(`"citations": true`)
		sep = ", "
	}
	if c.Hallucinations {
		b.WriteString(sep + `"hallucinations": true`)
		sep = ", "
	}
	if c.Length != nil {
		b.WriteString(sep + `"length": `)
		pyString(b, *c.Length)
		sep = ", "
	}
	if c.Originality != nil {
		b.WriteString(sep + `"originality": `)
		pyString(b, *c.Originality)
	}
	b.WriteByte('}')
}

// writeTools writes the tools list as json.dumps([t.to_openai_json() ...], indent=4).
func writeTools(b *strings.Builder, tools []FunctionDefinition) error {
	b.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    {\n        \"name\": ")
		pyString(b, t.Name)
		if t.Description != nil {
			b.WriteString(",\n        \"description\": ")
			pyString(b, *t.Description)
		}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			b.WriteString(",\n        \"parameters\": ")
			if err := pyIndentJSON(b, t.Parameters, 2); err != nil {
				return err
			}
		}
		b.WriteString("\n    }")
	}
	b.WriteString("\n]")
	return nil
}

func (p *Processor) removeSpecialTokens(s string) string {
	if !strings.Contains(s, "<|") {
		return s
	}
	s = reSanRole.ReplaceAllLiteralString(s, "")
	toks := specialTokens32
	if p.version == V33 {
		s = reSanCite.ReplaceAllLiteralString(s, "")
		s = reSanPlugin.ReplaceAllLiteralString(s, "")
		toks = specialTokens33
	}
	s = reSanTool.ReplaceAllLiteralString(s, "")
	for _, t := range toks {
		s = strings.ReplaceAll(s, t, "")
	}
	return s
}

// sanitizeTool cleans a tool's name, description and top-level parameter keys and string
// values, dropping keys that become empty. granite-io assumes every value is a string and
// raises TypeError on a real JSON schema; non-string values are kept as they are here.
func (p *Processor) sanitizeTool(t FunctionDefinition) (FunctionDefinition, error) {
	t.Name = p.removeSpecialTokens(t.Name)
	if t.Description != nil && *t.Description != "" {
		d := p.removeSpecialTokens(*t.Description)
		t.Description = &d
	}
	if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
		return t, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(t.Parameters)))
	tok, err := dec.Token()
	if err != nil {
		return t, err
	}
	if tok != json.Delim('{') {
		return t, nil
	}
	var out strings.Builder
	out.WriteByte('{')
	n := 0
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return t, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return t, err
		}
		k := p.removeSpecialTokens(kt.(string))
		if k == "" {
			continue
		}
		var sv string
		if json.Unmarshal(raw, &sv) == nil {
			raw, _ = json.Marshal(p.removeSpecialTokens(sv))
		}
		if n > 0 {
			out.WriteByte(',')
		}
		n++
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(raw)
	}
	out.WriteByte('}')
	t.Parameters = json.RawMessage(out.String())
	return t, nil
}

// Processor is Granite 3.2's or 3.3's input and output processor (one value is both).
type Processor struct {
	version Version
	now     func() time.Time
	newID   func() string
}

// Option configures a Processor.
type Option func(*Processor)

// WithClock sets where "Today's Date" comes from (default time.Now, read per request: granite-io
// reads it once at import, which goes stale in a long-lived server).
func WithClock(now func() time.Time) Option { return func(p *Processor) { p.now = now } }

// WithIDs sets how missing tool call ids are made (default: random UUIDv4, as granite-io).
func WithIDs(newID func() string) Option { return func(p *Processor) { p.newID = newID } }

// New returns the processor for a Granite prompt format.
func New(v Version, opts ...Option) *Processor {
	p := &Processor{version: v, now: time.Now, newID: randomUUID}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Version is the processor's prompt format.
func (p *Processor) Version() Version { return p.version }
