package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The decoders read what the gateway's readers of answers read, with the results encoding/json
// gave them: each has a mirror struct (the reader's former struct, with its tags and field
// types) that json.Unmarshal fills, and a fast path on jsonwire that takes the usual answer (exact
// member names, each once, values of the expected kinds) and gives up on anything else, which
// then goes to the mirror. The result is encoding/json's by construction; FuzzDecoders holds the
// fast path to the mirror on any input. A decoder reads only its reader's members: a member it
// does not read may hold anything, as before. An error is encoding/json's as it is, so that the
// callers' messages read as they did; they add what was being read.

// DecodeChunk reads one streamed event of either API as the chat stream assembler reads it: id,
// model, created, system_fingerprint, choices (index, text, delta, finish_reason, stop_reason)
// and usage. The fingerprint must be a string (or null): it is stored as the JSON string
// jsonwire.AppendString writes under EncodingJSON, nil when empty. A delta's reasoning is
// reasoning_content, or vLLM's newer reasoning when that is absent. Usage is kept raw (Raw),
// nil when absent or null; logprobs are not read.
func DecodeChunk(data []byte) (*Chunk, error) {
	if c, ok := decodeChunkFast(data); ok {
		return c, nil
	}
	var m chunk
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m.chunk(), nil
}

// DecodeCompletion reads a whole text completion, or one chunk of a stream of them, as the
// token-input stage reads it: id, created, model, system_fingerprint (raw, any value), choices
// (index, text, token_ids, finish_reason, stop_reason) and usage as counts (Raw nil; a usage
// repeated in the object merges, as encoding/json merges into one pointer).
func DecodeCompletion(data []byte) (*Completion, error) {
	if c, ok := decodeCompletionFast(data); ok {
		return c, nil
	}
	var m completionAnswer
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m.completion(), nil
}

// chunk is lib/chatstream's chunk, as it read one. The mirrors keep their readers' type names,
// which encoding/json's errors name (the chat stream assembler passes its errors on).
type chunk struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Created           int64           `json:"created"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Text         *string         `json:"text"`
	Delta        *delta          `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
}

type delta struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        []toolCallDelta `json:"tool_calls"`
}

type toolCallDelta struct {
	Index    int      `json:"index"`
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

func (m *chunk) chunk() *Chunk {
	c := &Chunk{Header: Header{ID: m.ID, Model: m.Model, Created: m.Created, SystemFingerprint: stringRaw(m.SystemFingerprint),
		Usage: rawUsage(m.Usage)}}
	if m.Choices != nil {
		c.Choices = make([]ChunkChoice, len(m.Choices))
	}
	for i, mc := range m.Choices {
		cc := ChunkChoice{Index: mc.Index, Text: mc.Text, FinishReason: mc.FinishReason, StopReason: mc.StopReason}
		if d := mc.Delta; d != nil {
			cc.Delta = &Delta{Role: d.Role, Content: d.Content, ReasoningContent: d.ReasoningContent}
			if cc.Delta.ReasoningContent == nil {
				cc.Delta.ReasoningContent = d.Reasoning
			}
			if d.ToolCalls != nil {
				cc.Delta.ToolCalls = make([]ToolCallDelta, len(d.ToolCalls))
			}
			for j, t := range d.ToolCalls {
				cc.Delta.ToolCalls[j] = ToolCallDelta{Index: t.Index, ID: t.ID, Type: t.Type, Function: t.Function}
			}
		}
		c.Choices[i] = cc
	}
	return c
}

// completionAnswer is stage/tokeninput's completionAnswer, as it read one.
type completionAnswer struct {
	ID                string          `json:"id"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	Choices           []choice        `json:"choices"`
	Usage             *Usage          `json:"usage"`
}

type choice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	TokenIDs     []int           `json:"token_ids"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
}

func (m *completionAnswer) completion() *Completion {
	c := &Completion{Header: Header{ID: m.ID, Created: m.Created, Model: m.Model, SystemFingerprint: m.SystemFingerprint, Usage: m.Usage}}
	if m.Choices != nil {
		c.Choices = make([]CompletionChoice, len(m.Choices))
	}
	for i, mc := range m.Choices {
		c.Choices[i] = CompletionChoice{Index: mc.Index, Text: mc.Text, TokenIDs: mc.TokenIDs, FinishReason: mc.FinishReason, StopReason: mc.StopReason}
	}
	return c
}

// stringRaw is a fingerprint read as a string, as the writers want it (see DecodeChunk).
func stringRaw(s string) Raw {
	if s == "" {
		return nil
	}
	return jsonwire.AppendString(nil, s, jsonwire.EncodingJSON)
}

// rawUsage is a usage kept raw; absent and null are none.
func rawUsage(r json.RawMessage) *Usage {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return &Usage{Raw: r}
}

// errUnusual stops the fast path: the input goes to the mirror. It is never returned.
var errUnusual = errors.New("openaiwire: left to encoding/json")

// reader is the fast path's walk over one document. Its methods return errUnusual, or the
// Scanner's error, for anything they do not take; the caller then gives up.
type reader struct {
	s    jsonwire.Scanner
	data []byte
}

// object walks the object that must come next, calling member with the index in names of each
// member it holds: a member named otherwise is skipped, unless encoding/json would match it to
// one of names (a case variant; an escaped or non-ASCII name, not looked into), and a member
// named twice gives up, since encoding/json's merging of repeats is the mirror's to do.
func (r *reader) object(names []string, member func(i int) error) error {
	if err := r.s.EnterObject(); err != nil {
		return errUnusual
	}
	var seen uint64
	for {
		key, more, err := r.s.NextMember()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		if !key.Plain() {
			return errUnusual
		}
		k := key.Contents(r.data)
		i := 0
		for i < len(names) && string(k) != names[i] {
			i++
		}
		if i == len(names) {
			for _, n := range names {
				if bytes.EqualFold(k, []byte(n)) {
					return errUnusual
				}
			}
			if _, err := r.s.ReadValue(); err != nil {
				return err
			}
			continue
		}
		if seen&(1<<i) != 0 {
			return errUnusual
		}
		seen |= 1 << i
		if err := member(i); err != nil {
			return err
		}
	}
}

// array walks the array that must come next (null: none, and no call), calling element for
// each; it reports whether there was an array, for a caller that tells [] from null.
func (r *reader) array(element func() error) (bool, error) {
	if r.s.ReadNull() {
		return false, nil
	}
	if err := r.s.EnterArray(); err != nil {
		return false, errUnusual
	}
	for {
		more, err := r.s.NextElement()
		if err != nil || !more {
			return true, err
		}
		if err := element(); err != nil {
			return true, err
		}
	}
}

// str reads a string into *dst; null leaves it.
func (r *reader) str(dst *string) error {
	if r.s.ReadNull() {
		return nil
	}
	t, err := r.s.ReadString()
	if err != nil {
		return errUnusual
	}
	*dst, err = jsonwire.UnescapeString(t.Contents(r.data), jsonwire.ReplaceInvalid)
	return err
}

// strPtr reads a string or null into *dst.
func (r *reader) strPtr(dst **string) error {
	if r.s.ReadNull() {
		*dst = nil
		return nil
	}
	var s string
	if err := r.str(&s); err != nil {
		return err
	}
	*dst = &s
	return nil
}

// int64 reads an integer into *dst; null leaves it. A number encoding/json would refuse for an
// integer (a fraction, an exponent, out of range) gives up.
func (r *reader) int64(dst *int64) error {
	if r.s.ReadNull() {
		return nil
	}
	t, err := r.s.ReadNumber()
	if err != nil || !t.Integer() {
		return errUnusual
	}
	n, err := strconv.ParseInt(string(t.Raw(r.data)), 10, 64)
	if err != nil {
		return errUnusual
	}
	*dst = n
	return nil
}

func (r *reader) int(dst *int) error {
	n := int64(*dst)
	if err := r.int64(&n); err != nil {
		return err
	}
	*dst = int(n)
	return nil
}

// raw reads any value as its bytes, copied (null too, as json.RawMessage has it).
func (r *reader) raw(dst *Raw) error {
	t, err := r.s.ReadValue()
	if err != nil {
		return err
	}
	*dst = append(Raw(nil), t.Raw(r.data)...)
	return nil
}

// finish ends the walk: the document must end here.
func (r *reader) finish(err error) bool {
	return err == nil && r.s.Finish() == nil
}

var (
	chunkNames       = []string{"id", "model", "created", "system_fingerprint", "choices", "usage"}
	chunkChoiceNames = []string{"index", "text", "delta", "finish_reason", "stop_reason"}
	deltaNames       = []string{"role", "content", "reasoning_content", "reasoning", "tool_calls"}
	toolCallNames    = []string{"index", "id", "type", "function"}
	functionNames    = []string{"name", "arguments"}
)

func decodeChunkFast(data []byte) (*Chunk, bool) {
	r := reader{s: jsonwire.NewScanner(data, jsonwire.Options{}), data: data}
	c := &Chunk{}
	var fp string
	var usage Raw
	err := r.object(chunkNames, func(i int) error {
		switch i {
		case 0:
			return r.str(&c.ID)
		case 1:
			return r.str(&c.Model)
		case 2:
			return r.int64(&c.Created)
		case 3:
			return r.str(&fp)
		case 4:
			c.Choices = []ChunkChoice{}
			ok, err := r.array(func() error {
				c.Choices = append(c.Choices, ChunkChoice{})
				return r.chunkChoice(&c.Choices[len(c.Choices)-1])
			})
			if !ok {
				c.Choices = nil
			}
			return err
		}
		return r.raw(&usage)
	})
	if !r.finish(err) {
		return nil, false
	}
	c.SystemFingerprint, c.Usage = stringRaw(fp), rawUsage(usage)
	return c, true
}

func (r *reader) chunkChoice(c *ChunkChoice) error {
	return r.object(chunkChoiceNames, func(i int) error {
		switch i {
		case 0:
			return r.int(&c.Index)
		case 1:
			return r.strPtr(&c.Text)
		case 2:
			if r.s.ReadNull() {
				return nil
			}
			c.Delta = &Delta{}
			return r.delta(c.Delta)
		case 3:
			return r.strPtr(&c.FinishReason)
		}
		return r.raw(&c.StopReason)
	})
}

func (r *reader) delta(d *Delta) error {
	var reasoning *string
	err := r.object(deltaNames, func(i int) error {
		switch i {
		case 0:
			return r.str(&d.Role)
		case 1:
			return r.strPtr(&d.Content)
		case 2:
			return r.strPtr(&d.ReasoningContent)
		case 3:
			return r.strPtr(&reasoning)
		}
		d.ToolCalls = []ToolCallDelta{}
		ok, err := r.array(func() error {
			d.ToolCalls = append(d.ToolCalls, ToolCallDelta{})
			return r.toolCall(&d.ToolCalls[len(d.ToolCalls)-1])
		})
		if !ok {
			d.ToolCalls = nil
		}
		return err
	})
	if d.ReasoningContent == nil {
		d.ReasoningContent = reasoning
	}
	return err
}

func (r *reader) toolCall(t *ToolCallDelta) error {
	return r.object(toolCallNames, func(i int) error {
		switch i {
		case 0:
			return r.int(&t.Index)
		case 1:
			return r.str(&t.ID)
		case 2:
			return r.str(&t.Type)
		}
		if r.s.ReadNull() {
			return nil
		}
		return r.object(functionNames, func(i int) error {
			if i == 0 {
				return r.str(&t.Function.Name)
			}
			return r.str(&t.Function.Arguments)
		})
	})
}

var (
	completionNames       = []string{"id", "created", "model", "system_fingerprint", "choices", "usage"}
	completionChoiceNames = []string{"index", "text", "token_ids", "finish_reason", "stop_reason"}
	usageNames            = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
)

func decodeCompletionFast(data []byte) (*Completion, bool) {
	r := reader{s: jsonwire.NewScanner(data, jsonwire.Options{}), data: data}
	c := &Completion{}
	err := r.object(completionNames, func(i int) error {
		switch i {
		case 0:
			return r.str(&c.ID)
		case 1:
			return r.int64(&c.Created)
		case 2:
			return r.str(&c.Model)
		case 3:
			return r.raw(&c.SystemFingerprint)
		case 4:
			return r.completionChoices(c, completionChoiceNames, r.completionChoice)
		}
		return r.usage(&c.Usage)
	})
	if !r.finish(err) {
		return nil, false
	}
	return c, true
}

// completionChoice reads member i (of completionChoiceNames) of a choice.
func (r *reader) completionChoice(c *CompletionChoice, i int) error {
	switch i {
	case 0:
		return r.int(&c.Index)
	case 1:
		return r.str(&c.Text)
	case 2:
		c.TokenIDs = []int{}
		ok, err := r.array(func() error {
			var id int
			err := r.int(&id)
			c.TokenIDs = append(c.TokenIDs, id)
			return err
		})
		if !ok {
			c.TokenIDs = nil
		}
		return err
	case 3:
		return r.strPtr(&c.FinishReason)
	}
	return r.raw(&c.StopReason)
}

// DecodeCompletionText reads a whole text completion into c as the Granite stage reads one, for
// its text: id, model, system_fingerprint (raw, any value), choices (text and finish_reason, in
// their order) and usage as counts (as DecodeCompletion reads it). Created, a choice's index,
// token_ids and stop_reason are not read: they are left zero, and no value there makes it fail,
// since that reader numbers the choices itself and keeps no more. c is overwritten; decoding
// into the caller's value, rather than returning a new one, saves a request an allocation.
func DecodeCompletionText(data []byte, c *Completion) error {
	*c = Completion{}
	if decodeCompletionTextFast(data, c) {
		return nil
	}
	return decodeMirror[textAnswer](data, c)
}

// DecodeCompletionChunk reads one event of a text completion stream into c as the Granite stage
// reads it: model, system_fingerprint (raw, any value), choices (index, text, finish_reason and
// stop_reason, raw), usage kept raw (Raw; nil when absent or null) and error (raw, as sent: an
// upstream failing mid-stream sends an error object as an event). The id and created are not
// read (the stage writes its own), nor token_ids. c's choices keep their array for the next
// chunk's, since a stream reads one chunk per token: what was read from a chunk does not
// outlive the next (raw values are copies, and so outlive data).
func DecodeCompletionChunk(data []byte, c *Completion) error {
	*c = Completion{Choices: c.Choices[:0]}
	if decodeCompletionChunkFast(data, c) {
		return nil
	}
	return decodeMirror[completionChunk](data, c)
}

// decodeMirror reads data into c with encoding/json, through the mirror M, for what the fast
// path gave up on: c then holds M's reading alone (not the elements of a kept array: the
// mirror's are encoding/json's, merged as it merges). The reading is returned by value, not
// written through c, and the fast path is called by the callers, not handed in: c is the
// caller's, often on its stack, and what a generic function hands to a method through its
// dictionary, or a function value gets, escapes.
func decodeMirror[M any, P interface {
	*M
	completion() Completion
}](data []byte, c *Completion) error {
	var m M
	err := json.Unmarshal(data, &m)
	*c = Completion{}
	if err == nil {
		*c = P(&m).completion()
	}
	return err
}

// textAnswer is stage/granitestage's completionAnswer, as it read one (the name differs from
// the token-input stage's mirror's; the Granite stage never shows the error's words).
type textAnswer struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	Choices           []textChoice    `json:"choices"`
	Usage             *Usage          `json:"usage"`
}

type textChoice struct {
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

func (m *textAnswer) completion() Completion {
	c := Completion{Header: Header{ID: m.ID, Model: m.Model, SystemFingerprint: m.SystemFingerprint, Usage: m.Usage}}
	if m.Choices != nil {
		c.Choices = make([]CompletionChoice, len(m.Choices))
	}
	for i, mc := range m.Choices {
		c.Choices[i] = CompletionChoice{Text: mc.Text, FinishReason: mc.FinishReason}
	}
	return c
}

// completionChunk is stage/granitestage's completionChunk, as it read one; the names are kept,
// since a stream's error quotes encoding/json's.
type completionChunk struct {
	Model             string          `json:"model"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	Choices           []chunkChoiceIn `json:"choices"`
	Usage             json.RawMessage `json:"usage"`
	Error             json.RawMessage `json:"error"`
}

type chunkChoiceIn struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
}

func (m *completionChunk) completion() Completion {
	c := Completion{Header: Header{Model: m.Model, SystemFingerprint: m.SystemFingerprint, Usage: rawUsage(m.Usage)}, Error: m.Error}
	if m.Choices != nil {
		c.Choices = make([]CompletionChoice, len(m.Choices))
	}
	for i, mc := range m.Choices {
		c.Choices[i] = CompletionChoice{Index: mc.Index, Text: mc.Text, FinishReason: mc.FinishReason, StopReason: mc.StopReason}
	}
	return c
}

var (
	textAnswerNames      = []string{"id", "model", "system_fingerprint", "choices", "usage"}
	textChoiceNames      = []string{"text", "finish_reason"}
	completionChunkNames = []string{"model", "system_fingerprint", "choices", "usage", "error"}
	chunkChoiceInNames   = []string{"index", "text", "finish_reason", "stop_reason"}
)

func decodeCompletionTextFast(data []byte, c *Completion) bool {
	r := reader{s: jsonwire.NewScanner(data, jsonwire.Options{}), data: data}
	err := r.object(textAnswerNames, func(i int) error {
		switch i {
		case 0:
			return r.str(&c.ID)
		case 1:
			return r.str(&c.Model)
		case 2:
			return r.raw(&c.SystemFingerprint)
		case 3:
			return r.completionChoices(c, textChoiceNames, func(ch *CompletionChoice, i int) error {
				if i == 0 {
					return r.str(&ch.Text)
				}
				return r.strPtr(&ch.FinishReason)
			})
		}
		return r.usage(&c.Usage)
	})
	return r.finish(err)
}

func decodeCompletionChunkFast(data []byte, c *Completion) bool {
	r := reader{s: jsonwire.NewScanner(data, jsonwire.Options{}), data: data}
	var usage Raw
	err := r.object(completionChunkNames, func(i int) error {
		switch i {
		case 0:
			return r.str(&c.Model)
		case 1:
			return r.raw(&c.SystemFingerprint)
		case 2:
			return r.completionChoices(c, chunkChoiceInNames, func(ch *CompletionChoice, i int) error {
				switch i {
				case 0:
					return r.int(&ch.Index)
				case 1:
					return r.str(&ch.Text)
				case 2:
					return r.strPtr(&ch.FinishReason)
				}
				return r.raw(&ch.StopReason)
			})
		case 3:
			return r.raw(&usage)
		}
		return r.raw(&c.Error)
	})
	c.Usage = rawUsage(usage)
	return r.finish(err)
}

// completionChoices reads choices (null: none) onto c.Choices, each member named in names by
// member; a null choice gives up (encoding/json reads it as a zero choice).
func (r *reader) completionChoices(c *Completion, names []string, member func(ch *CompletionChoice, i int) error) error {
	if c.Choices == nil {
		c.Choices = make([]CompletionChoice, 0, 1)
	}
	ok, err := r.array(func() error {
		c.Choices = append(c.Choices, CompletionChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		return r.object(names, func(i int) error { return member(ch, i) })
	})
	if !ok {
		c.Choices = nil
	}
	return err
}

// usage reads a usage object as counts into a new *dst (null: none).
func (r *reader) usage(dst **Usage) error {
	if r.s.ReadNull() {
		return nil
	}
	u := &Usage{}
	*dst = u
	return r.object(usageNames, func(i int) error {
		return r.int64([...]*int64{&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens}[i])
	})
}
