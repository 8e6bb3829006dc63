package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Events reads server-sent events as OpenAI streams them: each Next returns one event's data (the
// JSON of one chunk), until the "[DONE]" event or the end of the body, which are io.EOF. An event
// of type "error", or a data line holding an error object, is returned as the data it carries:
// the caller decodes the chunk and finds the error in it.
type Events struct {
	r    *bufio.Reader
	data []byte
	done bool
}

// NewEvents reads events from r.
func NewEvents(r io.Reader) *Events {
	return &Events{r: bufio.NewReaderSize(r, 16<<10)}
}

var errEventTooLong = errors.New("server-sent event longer than 16 MiB")

// Next returns the next event's data; it is valid until the following call.
func (e *Events) Next() ([]byte, error) {
	e.data = e.data[:0]
	have := false
	for {
		line, err := e.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: collect it whole, bounded.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = e.r.ReadSlice('\n')
				long = append(long, line...)
				if len(long) > 16<<20 {
					return nil, errEventTooLong
				}
			}
			line = long
		}
		if err != nil && !(err == io.EOF && len(line) > 0) {
			if err == io.EOF && have {
				return e.end()
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if have {
				return e.end()
			}
		case line[0] == ':': // a comment, such as a keep-alive
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if have {
					e.data = append(e.data, '\n')
				}
				e.data = append(e.data, value...)
				have = true
			}
		}
		if err == io.EOF {
			if have {
				return e.end()
			}
			return nil, io.EOF
		}
	}
}

// Done reports whether the events ended with the "[DONE]" event, rather than with the body.
func (e *Events) Done() bool { return e.done }

func (e *Events) end() ([]byte, error) {
	if string(e.data) == "[DONE]" {
		e.done = true
		return nil, io.EOF
	}
	return e.data, nil
}

// NewBody is a body that reads b, for a response a stage made (a cached answer). Finish reports
// usage as the response's own usage object does, which the stage passes in.
func NewBody(b []byte, usage Usage) Body {
	return &memBody{r: bytes.NewReader(b), usage: usage}
}

// NewEventBody is the body of a stream a stage made: each chunk as one "data:" event, then
// "data: [DONE]", as OpenAI streams. The chunks must be single-line JSON.
func NewEventBody(chunks [][]byte, usage Usage) Body {
	n := len("data: [DONE]\n\n")
	for _, c := range chunks {
		n += len("data: \n\n") + len(c)
	}
	b := make([]byte, 0, n)
	for _, c := range chunks {
		b = append(b, "data: "...)
		b = append(b, c...)
		b = append(b, "\n\n"...)
	}
	b = append(b, "data: [DONE]\n\n"...)
	// A stream without counts is charged its events, as an upstream's is; a cached one nothing.
	if usage.PromptTokens == 0 && usage.CompletionTokens == 0 && usage.Chunks == 0 && !usage.Cached {
		usage.Chunks = int64(len(chunks)) + 1
	}
	return NewBody(b, usage)
}

type memBody struct {
	r        *bytes.Reader
	usage    Usage
	finished bool
}

func (m *memBody) Read(b []byte) (int, error) {
	if m.finished {
		return 0, errFinished
	}
	return m.r.Read(b)
}

func (m *memBody) Finish(error) Usage {
	m.finished = true
	return m.usage
}

func (m *memBody) Err() error { return nil }

var errFinished = errors.New("response body already finished")

// RewriteEvents is a stream's body with each event's data passed through fn on its way out (an
// output processor): fn returns the data to send instead, or SkipEvent to drop the event; any
// other error ends the body with it. OpenAI's closing "[DONE]" passes through untouched, and Finish and Err are
// the upstream body's, so metering and usage still count what the upstream sent.
func RewriteEvents(b Body, fn func(data []byte) ([]byte, error)) Body {
	return &rewritten{Body: b, ev: NewEvents(b), fn: fn}
}

// SkipEvent, returned by RewriteEvents' fn, drops the event.
var SkipEvent = errors.New("skip this event")

type rewritten struct {
	Body
	ev  *Events
	fn  func([]byte) ([]byte, error)
	out []byte // rewritten events not yet read
	err error  // what ends the body once out is drained
}

func (r *rewritten) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		data, err := r.ev.Next()
		switch {
		case err == io.EOF && r.ev.Done():
			r.out, r.err = append(r.out[:0], "data: [DONE]\n\n"...), io.EOF
			continue
		case err != nil:
			r.err = err
			continue
		}
		data, err = r.fn(data)
		switch {
		case errors.Is(err, SkipEvent):
		case err != nil:
			r.err = err
		default:
			r.out = append(r.out[:0], "data: "...)
			r.out = append(r.out, data...)
			r.out = append(r.out, "\n\n"...)
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// EventTap errors.
var (
	// ErrEventTooLarge: a line or an event's data passed the tap's limit.
	ErrEventTooLarge = errors.New("a streamed event is over the bound")
	// ErrErrorEvent: the stream carried an event of type error (an upstream failing mid-stream).
	ErrErrorEvent = errors.New("the stream carried an error event")
	// ErrAfterDone: an event came after "[DONE]".
	ErrAfterDone = errors.New("a streamed event came after [DONE]")
)

// EventTap reads a stream's server-sent events from its bytes as they pass by, fed in whatever
// pieces they come, without holding the stream up: a stage that keeps a copy of an answer (the
// response cache, chat sessions) taps the body its client reads. Events are read as Events
// reads them (lines end with "\n", trailing "\r"s dropped, an event's "data:" lines joined with
// "\n", comments and other fields skipped, an event the stream ends in without its blank line
// still counted), and each one's data but "[DONE]" goes to emit. The tap fails, and takes no
// more, on a line or data longer than limit, an error event, an event after "[DONE]", or an
// error from emit. It is not safe for concurrent use.
type EventTap struct {
	limit int
	emit  func(data []byte) error
	line  []byte // the current line, up to its "\n"
	data  []byte // the current event's data
	have  bool   // the current event has a data line
	isErr bool   // the current event's type is error
	done  bool
	err   error
}

// NewEventTap returns a tap that gives emit each event's data (valid only during the call).
func NewEventTap(limit int, emit func(data []byte) error) *EventTap {
	return &EventTap{limit: limit, emit: emit}
}

// Write takes the stream's next bytes.
func (t *EventTap) Write(p []byte) {
	for len(p) > 0 && t.err == nil {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(t.line)+len(p) > t.limit {
				t.err = ErrEventTooLarge
				return
			}
			t.line = append(t.line, p...)
			return
		}
		if len(t.line)+i > t.limit {
			t.err = ErrEventTooLarge
			return
		}
		line := p[:i]
		if len(t.line) > 0 {
			t.line = append(t.line, line...)
			line = t.line
		}
		p = p[i+1:]
		t.onLine(line)
		t.line = t.line[:0]
	}
}

// End is the stream's end: the event it ended in, without its blank line, counts.
func (t *EventTap) End() {
	if t.err == nil && len(t.line) > 0 {
		t.onLine(t.line)
		t.line = t.line[:0]
	}
	if t.err == nil {
		t.dispatch()
	}
}

// Done reports whether "[DONE]" came; Err why the tap failed (nil while it has not).
func (t *EventTap) Done() bool { return t.done }

// Err is why the tap stopped taking events: nil while it has not.
func (t *EventTap) Err() error { return t.err }

func (t *EventTap) onLine(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		t.dispatch()
		return
	}
	if line[0] == ':' { // a comment: a keep-alive
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "data":
		if t.have {
			t.data = append(t.data, '\n')
		}
		if len(t.data)+len(value) > t.limit {
			t.err = ErrEventTooLarge
			return
		}
		t.data = append(t.data, value...)
		t.have = true
	case "event":
		t.isErr = string(value) == "error"
	}
}

// dispatch ends the current event.
func (t *EventTap) dispatch() {
	have, isErr := t.have, t.isErr
	t.have, t.isErr = false, false
	data := t.data
	t.data = t.data[:0]
	switch {
	case !have:
	case t.done:
		t.err = ErrAfterDone
	case isErr:
		t.err = ErrErrorEvent
	case string(data) == "[DONE]":
		t.done = true
	default:
		if err := t.emit(data); err != nil {
			t.err = err
		}
	}
}
