package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
)

// Topics names the bus topics of batch work.
type Topics struct {
	// Requests carries chunks of lines to workers.
	Requests string
	// Results carries the lines' results to the collectors.
	Results string
	// Retries carries lines to try again after a wait. They leave their chunk so that it is
	// acked with the rest of its lines, rather than holding its partition for the wait; workers
	// consume it unordered (Bus.SubscribeUnordered), so a retry waiting for its time does not
	// hold back the retries behind it either.
	Retries string
	// DeadLetter receives lines that kept failing after their retries, with the last error,
	// for an operator to inspect or replay; they are also in the batch's error file.
	DeadLetter string
}

// DefaultTopics are the topics' names with the default prefix, "infergate.batch".
func DefaultTopics() Topics { return TopicsWithPrefix("infergate.batch") }

// TopicsWithPrefix names the topics prefix.requests, prefix.results, prefix.retries and
// prefix.dead-letter.
func TopicsWithPrefix(prefix string) Topics {
	return Topics{Requests: prefix + ".requests", Results: prefix + ".results", Retries: prefix + ".retries",
		DeadLetter: prefix + ".dead-letter"}
}

// Consumer groups: every worker shares the requests and the retries (in a group of their own,
// so that neither topic's rebalances stop the other), every collector the results.
const (
	workersGroup    = "infergate-batch-workers"
	retriersGroup   = "infergate-batch-retriers"
	collectorsGroup = "infergate-batch-collectors"
)

// chunk is a requests-topic message: some lines of one batch.
type chunk struct {
	Batch    string `json:"batch"`
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	Lines    []Line `json:"lines"`
	// On the retries topic: the tries its lines already had, and when (Unix ms) to try again.
	Attempts  int   `json:"attempts,omitempty"`
	NotBefore int64 `json:"not_before,omitempty"`
}

// resultLine is one line's result on the results topic.
type resultLine struct {
	CustomID string                `json:"custom_id"`
	Kind     batchstate.ResultKind `json:"kind"`
	Line     json.RawMessage       `json:"line,omitempty"`
}

// results is a results-topic message: the results of one chunk's lines.
type results struct {
	Batch   string       `json:"batch"`
	Results []resultLine `json:"results"`
}

// deadLetter is a dead-letter-topic message: a line that kept failing.
type deadLetter struct {
	Batch    string          `json:"batch"`
	Endpoint string          `json:"endpoint"`
	CustomID string          `json:"custom_id"`
	Body     json.RawMessage `json:"body"`
	Attempts int             `json:"attempts"`
	Error    string          `json:"error"`
}

// newMessage encodes v as a message partitioned by key. HTML characters stay as they are: the
// default escaping would grow a body full of '<' sixfold, past a broker's message size limit.
func newMessage(key string, v any) (*message.Message, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding a batch message: %w", err)
	}
	return newRawMessage(key, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// encodeChunk writes a chunk's message by hand: its bodies were validated when the file was,
// so they are copied as they are, not re-encoded (the dispatch of a large batch is mostly this).
func encodeChunk(c *chunk) []byte {
	n := 128
	for _, l := range c.Lines {
		n += len(l.CustomID) + len(l.Body) + 32
	}
	b := make([]byte, 0, n)
	b = append(b, `{"batch":`...)
	b = tensor.AppendJSONString(b, c.Batch)
	b = append(b, `,"endpoint":`...)
	b = tensor.AppendJSONString(b, c.Endpoint)
	b = append(b, `,"model":`...)
	b = tensor.AppendJSONString(b, c.Model)
	b = append(b, `,"lines":[`...)
	for i, l := range c.Lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"custom_id":`...)
		b = tensor.AppendJSONString(b, l.CustomID)
		b = append(b, `,"body":`...)
		b = append(b, l.Body...)
		b = append(b, '}')
	}
	b = append(b, ']')
	if c.Attempts > 0 {
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(c.Attempts), 10)
	}
	if c.NotBefore > 0 {
		b = append(b, `,"not_before":`...)
		b = strconv.AppendInt(b, c.NotBefore, 10)
	}
	return append(b, '}')
}

// newRawMessage is a message of payload partitioned by key.
func newRawMessage(key string, payload []byte) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), payload)
	m.Metadata.Set(bus.KeyMetadata, key)
	return m
}

var errBadMessage = errors.New("malformed batch message")

// splitResults packs results into messages of at most maxBytes of lines each; a line larger
// than that comes back in big, to be stored without the bus (a broker refuses messages over
// its size limit, 1 MB by default).
func splitResults(r *results, maxBytes int) (msgs []*results, big []resultLine) {
	cur, size := &results{Batch: r.Batch}, 0
	for _, l := range r.Results {
		switch {
		case len(l.Line) > maxBytes:
			big = append(big, l)
			continue
		case size+len(l.Line) > maxBytes && len(cur.Results) > 0:
			msgs = append(msgs, cur)
			cur, size = &results{Batch: r.Batch}, 0
		}
		cur.Results = append(cur.Results, l)
		size += len(l.Line)
	}
	if len(cur.Results) > 0 {
		msgs = append(msgs, cur)
	}
	return msgs, big
}

// decodeChunk decodes a requests-topic message, checking what the worker relies on.
func decodeChunk(b []byte) (*chunk, error) {
	var c chunk
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadMessage, err)
	}
	if c.Batch == "" || !endpoints[c.Endpoint] || len(c.Lines) == 0 {
		return nil, fmt.Errorf("%w: no batch, endpoint or lines", errBadMessage)
	}
	if c.Attempts < 0 || c.NotBefore < 0 {
		return nil, fmt.Errorf("%w: negative attempts or not_before", errBadMessage)
	}
	for _, l := range c.Lines {
		if l.CustomID == "" || len(l.Body) == 0 {
			return nil, fmt.Errorf("%w: a line without custom_id or body", errBadMessage)
		}
	}
	return &c, nil
}

// decodeResults decodes a results-topic message.
func decodeResults(b []byte) (*results, error) {
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadMessage, err)
	}
	if r.Batch == "" {
		return nil, fmt.Errorf("%w: no batch", errBadMessage)
	}
	for _, l := range r.Results {
		if l.CustomID == "" || l.Kind < batchstate.Output || l.Kind > batchstate.Skipped || (l.Kind != batchstate.Skipped) != (len(l.Line) > 0) {
			return nil, fmt.Errorf("%w: a result without custom_id, with an unknown kind, or a line that does not match its kind", errBadMessage)
		}
	}
	return &r, nil
}
