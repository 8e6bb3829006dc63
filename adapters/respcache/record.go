package respcache

import (
	"bytes"
	"errors"
	"github.com/infergate/infergate/adapters/llm/chatstream"
	"io"

	"github.com/infergate/infergate/adapters/pipeline"
)

// recorder is a miss's response body: it passes the upstream's bytes through unchanged, as they
// come, and keeps a copy on the side (a non-streamed answer's bytes, or a stream assembled event
// by event into the equivalent answer), bounded by max. Finish hands the result to done, with
// the reason it may not be stored, if any; done runs once.
type recorder struct {
	pipeline.Body
	stream bool
	max    int
	buf    []byte    // a non-streamed answer so far
	sse    sseFeeder // a stream's events
	skip   string    // a reason already known not to store
	eof    bool      // Read returned io.EOF
	ended  bool      // Finish ran
	done   func(resp []byte, skip string)
}

func newRecorder(b pipeline.Body, stream bool, path string, max int, done func([]byte, string)) *recorder {
	r := &recorder{Body: b, stream: stream, max: max, done: done}
	if stream {
		r.sse = sseFeeder{asm: newAssembler(path, max), max: max}
	}
	return r
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Body.Read(p)
	if n > 0 && r.skip == "" {
		r.keep(p[:n])
	}
	if err == io.EOF {
		r.eof = true
	}
	return n, err
}

func (r *recorder) keep(b []byte) {
	if r.stream {
		r.sse.feed(b)
		if r.sse.err != nil {
			r.skip = skipPartial
			if errors.Is(r.sse.err, errFeedTooLarge) || errors.Is(r.sse.err, chatstream.ErrTooLarge) {
				r.skip = skipTooLarge
			}
		}
		return
	}
	if len(r.buf)+len(b) > r.max {
		r.skip, r.buf = skipTooLarge, nil
		return
	}
	r.buf = append(r.buf, b...)
}

// Finish finishes the upstream's body, then reports the answer: storable only when it was read
// to its end, the upstream failed nothing and the client took all of it.
func (r *recorder) Finish(clientErr error) pipeline.Usage {
	u := r.Body.Finish(clientErr)
	if r.ended {
		return u
	}
	r.ended = true
	skip := r.skip
	if skip == "" && (clientErr != nil || !r.eof || r.Body.Err() != nil) {
		skip = skipPartial
	}
	var resp []byte
	if skip == "" {
		if r.stream {
			r.sse.end()
			var ok bool
			if resp, ok = r.sse.asm.Result(); !r.sse.done || !ok || r.sse.err != nil {
				resp, skip = nil, skipPartial
			}
		} else {
			resp = r.buf
		}
	}
	r.buf = nil
	r.done(resp, skip)
	return u
}

var (
	errFeedTooLarge = errors.New("respcache: stream event over the entry bound")
	errAfterDone    = errors.New("respcache: stream event after [DONE]")
	errErrorEvent   = errors.New("respcache: stream error event")
)

// sseFeeder reads server-sent events from the bytes it is fed, in whatever pieces they come,
// and adds each event's data to asm; "[DONE]" ends the stream. A line or event longer than max
// stops it (err), as does an error event or anything after [DONE].
type sseFeeder struct {
	asm   *assembler
	max   int
	line  []byte // an incomplete line
	data  []byte // the current event's data
	have  bool   // the current event has a data line
	isErr bool   // the current event's type is "error"
	done  bool
	err   error
}

func (f *sseFeeder) feed(b []byte) {
	for len(b) > 0 && f.err == nil {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(f.line)+len(b) > f.max {
				f.err = errFeedTooLarge
				return
			}
			f.line = append(f.line, b...)
			return
		}
		if len(f.line)+i > f.max {
			f.err = errFeedTooLarge
			return
		}
		line := b[:i]
		if len(f.line) > 0 {
			f.line = append(f.line, line...)
			line = f.line
		}
		b = b[i+1:]
		f.onLine(line)
		f.line = f.line[:0]
	}
}

func (f *sseFeeder) onLine(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) == 0 {
		f.dispatch()
		return
	}
	if line[0] == ':' { // a comment: a keep-alive
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "data":
		if f.have {
			f.data = append(f.data, '\n')
		}
		if len(f.data)+len(value) > f.max {
			f.err = errFeedTooLarge
			return
		}
		f.data = append(f.data, value...)
		f.have = true
	case "event":
		f.isErr = string(value) == "error"
	}
}

// dispatch takes the event whose data is complete.
func (f *sseFeeder) dispatch() {
	have, isErr := f.have, f.isErr
	f.have, f.isErr = false, false
	data := f.data
	f.data = f.data[:0]
	switch {
	case !have:
	case f.done:
		f.err = errAfterDone
	case isErr:
		f.err = errErrorEvent
	case string(data) == "[DONE]":
		f.done = true
	default:
		if err := f.asm.Add(data); err != nil {
			f.err = err
		}
	}
}

// end takes an event the body ended in without its blank line, as a reader of the stream does.
func (f *sseFeeder) end() {
	if f.err == nil && len(f.line) > 0 {
		f.onLine(f.line)
		f.line = f.line[:0]
	}
	if f.err == nil {
		f.dispatch()
	}
}
