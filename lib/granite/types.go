package granite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Roles of chat messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Limits on what a request may carry; a request over them is a ValidationError, so an untrusted
// client cannot make a render cost more than its own bytes times a small constant.
const (
	MaxMessages  = 4096
	MaxDocuments = 1024
	MaxTools     = 512
	// MaxOutputBytes bounds a completion whose citation and hallucination sections the output
	// processors parse (that parse is not linear in the text). A longer one still has its
	// reasoning, answer and tool calls parsed; its sections, if it has any, come after the answer
	// in the content, unparsed, with a ParseError.
	MaxOutputBytes = 4 << 20
)

// ChatRequest is granite-io's ChatCompletionInputs with the Granite 3.x fields: what a chat
// client sends, plus the capability switches (documents, controls, thinking, sanitize).
type ChatRequest struct {
	Messages  []Message            `json:"messages"`
	Tools     []FunctionDefinition `json:"tools,omitempty"`
	Documents []Document           `json:"documents,omitempty"`
	// Controls nil and Controls{} differ: 3.3 parses citations and hallucinations only when
	// the request had a controls record at all (granite-io's behaviour, issue #173).
	Controls *Controls `json:"controls,omitempty"`
	Thinking bool      `json:"thinking,omitempty"`
	// Sanitize is "", "inputs" (strip special tokens from message contents) or "aggressive"
	// (also documents and tool definitions).
	Sanitize string `json:"sanitize,omitempty"`
	// Params are the completion parameters (OpenAI /v1/completions fields: max_tokens,
	// temperature, n, stop, ...) passed to the Backend untouched (granite-io's generate_inputs).
	Params map[string]any `json:"generate_inputs,omitempty"`
}

// Message is one chat turn. Assistant tool calls and a tool message's call id are carried but
// not rendered: Granite's template drops them.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// FunctionDefinition is a tool as Granite sees it: flat, not wrapped in {"type":"function"}.
// Parameters keep the caller's key order, which the prompt reproduces.
type FunctionDefinition struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Document is a RAG passage. DocID is required by Granite 3.3 and refused by Granite 3.2.
type Document struct {
	Text  string   `json:"text"`
	DocID *DocID   `json:"doc_id,omitempty"`
	Score *float64 `json:"score,omitempty"`
}

// DocID is a document id, sent as a JSON string or integer and rendered as its string form.
type DocID struct {
	S     string
	IsInt bool
}

// UnmarshalJSON accepts a string or an integer, as granite-io's str|int does.
func (d *DocID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		d.IsInt = false
		return json.Unmarshal(b, &d.S)
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("doc_id must be a string or an integer, got %.40s", b)
	}
	d.S, d.IsInt = strconv.FormatInt(n, 10), true
	return nil
}

// MarshalJSON writes the id back in the form it came in.
func (d DocID) MarshalJSON() ([]byte, error) {
	if d.IsInt {
		return []byte(d.S), nil
	}
	return json.Marshal(d.S)
}

// Controls are Granite's output controls. Length and Originality are case-sensitive.
type Controls struct {
	Citations      bool    `json:"citations,omitempty"`
	Hallucinations bool    `json:"hallucinations,omitempty"`
	Length         *string `json:"length,omitempty"`      // "short" or "long"
	Originality    *string `json:"originality,omitempty"` // "extractive" or "abstractive"
}

// ToolCall is a function call the model made. Arguments is a JSON object (granite-io's dict),
// not OpenAI's JSON string; a chat surface wraps it into a string.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Citation links a span of the answer to a span of a document. Offsets count characters
// (Unicode code points), as granite-io's do.
type Citation struct {
	CitationID    string `json:"citation_id"`
	DocID         string `json:"doc_id"`
	ContextText   string `json:"context_text"`
	ContextBegin  int    `json:"context_begin"`
	ContextEnd    int    `json:"context_end"`
	ResponseText  string `json:"response_text"`
	ResponseBegin int    `json:"response_begin"`
	ResponseEnd   int    `json:"response_end"`
}

// CitedDocument is a document the answer cites, with the full input text when the quote was
// found in one of the request's documents.
type CitedDocument struct {
	DocID string `json:"doc_id"`
	Text  string `json:"text"`
	// CitationID is the citation the model listed it under (not in granite-io's message
	// shape, kept for callers that join the two lists).
	CitationID string `json:"-"`
}

// Hallucination is a sentence of the answer the model flagged, with its risk.
type Hallucination struct {
	HallucinationID string `json:"hallucination_id"`
	Risk            string `json:"risk"`
	ResponseText    string `json:"response_text"`
	ResponseBegin   int    `json:"response_begin"`
	ResponseEnd     int    `json:"response_end"`
}

// AssistantMessage is a parsed completion. Nil slices and pointers mean "not present", as
// granite-io's None does.
type AssistantMessage struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	Citations        []Citation      `json:"citations,omitempty"`
	Documents        []CitedDocument `json:"documents,omitempty"`
	Hallucinations   []Hallucination `json:"hallucinations,omitempty"`
	StopReason       string          `json:"stop_reason,omitempty"`
	// Raw is the model's text as it came, so the turn can be sent back verbatim.
	Raw string `json:"raw,omitempty"`
	// ParseError says why the citations/hallucinations part could not be parsed (granite-io
	// raises there; Content is then the answer, then that part as the model wrote it), or that
	// a thought was not closed (Content is then the whole text).
	ParseError string `json:"parse_error,omitempty"`
}

// Generation is one completion from a Backend (one choice).
type Generation struct {
	Text       string
	StopReason string
}

// Result is one parsed completion (granite-io's ChatCompletionResult).
type Result struct {
	NextMessage AssistantMessage `json:"next_message"`
	// Votes is how many samples gave this answer, set by MajorityVoting (0 elsewhere).
	Votes int `json:"votes,omitempty"`
}

// ValidationError is a request Granite's prompt format cannot express; Rule names the rule
// (stable, for an HTTP 400 body), Msg says it in words.
type ValidationError struct {
	Rule string
	Msg  string
}

func (e *ValidationError) Error() string { return "granite: " + e.Rule + ": " + e.Msg }

func invalid(rule, format string, args ...any) error {
	return &ValidationError{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}
