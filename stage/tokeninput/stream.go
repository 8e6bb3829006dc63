package tokeninput

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/lib/tokenizer"
)

// chatStream is a completion stream's body turned into a chat completion stream.
type chatStream struct {
	inner pipeline.Body
	ev    *pipeline.Events
	p     *params

	id, model string
	created   int64
	fp        json.RawMessage
	choices   map[int]*streamChoice
	done      int  // choices ended
	cut       bool // a choice ended at a stop string the upstream went past
	upUsage   *openaiwire.Usage

	out      []byte // converted events not yet read
	end      error  // what ends the body once out is drained
	finished bool
	usage    pipeline.Usage
}

// streamChoice is one choice's state in a stream.
type streamChoice struct {
	started, done bool
	pending       string // text held back: it may be the start of a stop string
	dec           *tokenizer.StreamDecoder
	emitted       strings.Builder // text sent, counted at the end when the upstream sends no usage
	ids           int64           // token ids the upstream sent, when it sends them
}

func newChatStream(inner pipeline.Body, p *params) *chatStream {
	return &chatStream{inner: inner, ev: pipeline.NewEvents(inner), p: p, choices: map[int]*streamChoice{}}
}

var errBadChunk = errors.New("the upstream sent a stream event that is not a completion chunk")

func (s *chatStream) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.end != nil {
			return 0, s.end
		}
		data, err := s.ev.Next()
		switch {
		case err == io.EOF && s.ev.Done():
			s.close()
		case err != nil:
			s.end = err
		default:
			s.convert(data)
		}
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, nil
}

// Finish ends the upstream's body and returns the usage: the upstream's, with what it left out
// counted by the gateway (the prompt's ids, the text sent).
func (s *chatStream) Finish(clientErr error) pipeline.Usage {
	if s.finished {
		return s.usage
	}
	s.finished = true
	u := s.inner.Finish(clientErr)
	if u.Status == 200 && u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens, u.CompletionTokens = int64(s.p.promptLen), s.completionTokens()
	}
	s.usage = u
	return u
}

func (s *chatStream) Err() error { return s.inner.Err() }

func (s *chatStream) completionTokens() int64 {
	var n int64
	for _, c := range s.choices {
		if c.ids > 0 {
			n += c.ids
		} else {
			n += int64(s.p.tok.Count(c.emitted.String(), tokenizer.Options{}))
		}
	}
	return n
}

func (s *chatStream) choice(i int) *streamChoice {
	c := s.choices[i]
	if c == nil {
		c = &streamChoice{}
		s.choices[i] = c
	}
	return c
}

// convert turns one upstream event into chat chunks.
func (s *chatStream) convert(data []byte) {
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &probe) == nil && len(probe.Error) > 0 && string(probe.Error) != "null" {
		s.event(data) // an error event reads the same in both APIs
		return
	}
	c, err := openaiwire.DecodeCompletion(data)
	if err != nil {
		s.end = errBadChunk
		return
	}
	if s.id == "" {
		s.id, s.model, s.created, s.fp = chatID(c.ID), c.Model, c.Created, c.SystemFingerprint
	}
	if c.Usage != nil {
		s.upUsage = c.Usage
	}
	for _, ch := range c.Choices {
		st := s.choice(ch.Index)
		if st.done {
			continue
		}
		text := ch.Text
		if len(ch.TokenIDs) > 0 {
			st.ids += int64(len(ch.TokenIDs))
			if text == "" {
				if st.dec == nil {
					st.dec = s.p.tok.NewDecoder(true).Continuing()
				}
				var sb strings.Builder
				for _, id := range ch.TokenIDs {
					sb.WriteString(st.dec.Add(id))
				}
				text = sb.String()
			}
		}
		if !st.started {
			st.started = true
			empty := ""
			s.chunk(ch.Index, openaiwire.Delta{Role: "assistant", Content: &empty}, nil, nil)
		}
		st.pending += text
		if cut, which, ok := cutStop(st.pending, s.p.stop); ok {
			reason, _ := json.Marshal(which)
			s.end1(ch.Index, st, cut, &reasonStop, reason)
			s.cut = true
			continue
		}
		if ch.FinishReason != nil {
			rest := st.pending
			if st.dec != nil {
				rest += st.dec.Flush()
			}
			s.end1(ch.Index, st, rest, ch.FinishReason, ch.StopReason)
			continue
		}
		if send := len(st.pending) - holdBack(st.pending, s.p.stop); send > 0 {
			s.content(ch.Index, st, st.pending[:send])
			st.pending = st.pending[send:]
		}
	}
	if s.cut && s.done >= s.p.n {
		// Every choice has ended, one at a stop string the upstream did not honour: it would
		// generate on, so the stream ends here.
		s.close()
	}
}

// end1 ends one choice with its last text and finish reason.
func (s *chatStream) end1(i int, st *streamChoice, text string, reason *string, stopReason json.RawMessage) {
	st.emitted.WriteString(text)
	d := openaiwire.Delta{}
	if text != "" {
		d.Content = &text
	}
	s.chunk(i, d, reason, stopReason)
	st.done, st.pending = true, ""
	s.done++
}

func (s *chatStream) content(i int, st *streamChoice, text string) {
	st.emitted.WriteString(text)
	s.chunk(i, openaiwire.Delta{Content: &text}, nil, nil)
}

// close ends the stream: the text still held back, the usage chunk when the client asked for it,
// and [DONE].
func (s *chatStream) close() {
	for _, i := range slices.Sorted(maps.Keys(s.choices)) {
		if st := s.choices[i]; st.started && !st.done && st.pending != "" {
			s.content(i, st, st.pending)
			st.pending = ""
		}
	}
	if s.p.includeUsage {
		u := s.upUsage
		if u == nil {
			u = &openaiwire.Usage{PromptTokens: int64(s.p.promptLen), CompletionTokens: s.completionTokens()}
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		s.encode(openaiwire.Chunk{Header: openaiwire.Header{Usage: u}, Choices: []openaiwire.ChunkChoice{}})
	}
	s.out = append(s.out, "data: [DONE]\n\n"...)
	s.end = io.EOF
}

func (s *chatStream) chunk(i int, d openaiwire.Delta, reason *string, stopReason json.RawMessage) {
	s.encode(openaiwire.Chunk{Choices: []openaiwire.ChunkChoice{{Index: i, Delta: &d, FinishReason: reason, StopReason: stopReason}}})
}

// encode sends c with the stream's id, model and fingerprint, the fingerprint last and the
// usage as counts: the bytes this stage's clients have always had.
func (s *chatStream) encode(c openaiwire.Chunk) {
	c.ID, c.Object, c.Created, c.Model, c.SystemFingerprint = s.id, "chat.completion.chunk", s.created, s.model, s.fp
	s.out = append(s.out, "data: "...)
	s.out = c.AppendJSON(s.out, openaiwire.Options{FingerprintLast: true})
	s.out = append(s.out, "\n\n"...)
}

func (s *chatStream) event(data []byte) {
	s.out = append(s.out, "data: "...)
	s.out = append(s.out, data...)
	s.out = append(s.out, "\n\n"...)
}

// holdBack is how many bytes at the end of text could begin one of the stop strings.
func holdBack(text string, stop []string) int {
	n := 0
	for _, s := range stop {
		for k := min(len(s)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, s[:k]) {
				n = k
				break
			}
		}
	}
	return n
}
