package respcache

import (
	"errors"
	"io"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chatstream"
)

// recorder is a miss's response body: it passes the upstream's bytes through unchanged, as they
// come, and keeps a copy on the side (a non-streamed answer's bytes, or a stream assembled event
// by event into the equivalent answer), bounded by max. Finish hands the result to done, with
// the reason it may not be stored, if any; done runs once.
type recorder struct {
	pipeline.Body
	stream bool
	max    int
	buf    []byte             // a non-streamed answer so far
	sse    *pipeline.EventTap // a stream's events, into asm
	asm    *assembler
	skip   string // a reason already known not to store
	eof    bool   // Read returned io.EOF
	ended  bool   // Finish ran
	done   func(resp []byte, skip string)
}

func newRecorder(b pipeline.Body, stream bool, path string, max int, done func([]byte, string)) *recorder {
	r := &recorder{Body: b, stream: stream, max: max, done: done}
	if stream {
		r.asm = newAssembler(path, max)
		r.sse = pipeline.NewEventTap(max, r.asm.Add)
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
		r.sse.Write(b)
		if err := r.sse.Err(); err != nil {
			r.skip = skipPartial
			if errors.Is(err, pipeline.ErrEventTooLarge) || errors.Is(err, chatstream.ErrTooLarge) {
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
// to its end (a stream: to its [DONE]), the upstream failed nothing and the client took all of
// it.
func (r *recorder) Finish(clientErr error) pipeline.Usage {
	u := r.Body.Finish(clientErr)
	if r.ended {
		return u
	}
	r.ended = true
	skip := r.skip
	// A surface that decodes the events stops reading at the [DONE], and the body's end may
	// come much later.
	whole := r.eof || r.stream && r.sse.Done()
	if skip == "" && (clientErr != nil || !whole || r.Body.Err() != nil) {
		skip = skipPartial
	}
	var resp []byte
	if skip == "" {
		if r.stream {
			r.sse.End()
			var ok bool
			if resp, ok = r.asm.Result(); !r.sse.Done() || !ok || r.sse.Err() != nil {
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
