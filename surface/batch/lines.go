package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/store/batchstate"
)

// Endpoints a batch may run, as OpenAI's batch API names them.
var endpoints = map[string]bool{
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/embeddings":       true,
	"/v1/responses":        true,
}

// Validation limits, beyond which a file fails validation as a whole.
const (
	maxCustomIDBytes = 512
	// maxReportedErrors bounds the errors a failed batch lists: the first ones say what is wrong.
	maxReportedErrors = 100
)

// Line is one request of a batch, as a bus message carries it.
type Line struct {
	CustomID string          `json:"custom_id"`
	Body     json.RawMessage `json:"body"`
}

// inputLine is a line of an input file as OpenAI defines it.
type inputLine struct {
	CustomID *string         `json:"custom_id"`
	Method   *string         `json:"method"`
	URL      *string         `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// input is what validating an input file keeps: the model its lines name, how many lines it
// holds, and a checksum of its bytes. The lines themselves are not kept: a file may hold hundreds
// of MB, so each step that needs them reads the file again (files are immutable once uploaded;
// the checksum tells whether a later read saw the same bytes).
type input struct {
	model string
	n     int
	sum   uint32
}

// crcTable is the checksum's: CRC-32C, which the CPU computes at memory speed.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// scanInput reads an input file for a batch of endpoint and validates every line: well-formed
// JSON, a unique custom_id, method POST, the batch's url, a body naming the model (one model per
// file), no streaming. Nothing runs unless the whole file is valid, so a batch's first read of its
// file passes each as nil: every line is checked and the errors (line-numbered, at most
// maxReportedErrors) that fail the batch are returned. A later read that needs the lines (a
// give-up's, a redispatch's) passes each; it is called for each valid line, in order, and the scan
// stops at the first invalid line (the file was valid before: it changed, which is reported as
// the errors hold) or at the first error from each, which scanInput returns as it is. Memory is one
// line and the set of custom_ids, whatever the file's size.
func scanInput(r io.Reader, endpoint string, maxLines, maxLineBytes int, each func(Line) error) (input, []batchstate.ErrorEntry, error) {
	var (
		in   input
		errs []batchstate.ErrorEntry
		seen = map[string]int{}
	)
	fail := func(line int, code, param, format string, args ...any) {
		if len(errs) < maxReportedErrors {
			e := batchstate.ErrorEntry{Code: code, Message: fmt.Sprintf(format, args...), Line: &line}
			if param != "" {
				e.Param = &param
			}
			errs = append(errs, e)
		}
	}
	h := crc32.New(crcTable)
	sc := bufio.NewScanner(io.TeeReader(r, h))
	sc.Buffer(make([]byte, 0, min(64<<10, maxLineBytes)), maxLineBytes)
	n := 0
	for sc.Scan() {
		if each != nil && errs != nil {
			return input{}, errs, nil
		}
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue // blank lines (a trailing newline, say) hold no request
		}
		if in.n >= maxLines {
			fail(n, "too_many_requests", "", "The input file has more than %d requests.", maxLines)
			break
		}
		var l inputLine
		if err := json.Unmarshal(raw, &l); err != nil {
			fail(n, "invalid_json_line", "", "This line is not parseable as valid JSON: %v.", jsonProblem(err))
			continue
		}
		switch {
		case l.CustomID == nil || *l.CustomID == "":
			fail(n, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
			continue
		case len(*l.CustomID) > maxCustomIDBytes:
			fail(n, "invalid_value", "custom_id", "custom_id is longer than %d bytes.", maxCustomIDBytes)
			continue
		case l.Method == nil:
			fail(n, "missing_required_parameter", "method", "Missing required parameter: 'method'.")
			continue
		case *l.Method != "POST":
			fail(n, "invalid_value", "method", "Invalid method %q: only POST is supported.", *l.Method)
			continue
		case l.URL == nil:
			fail(n, "missing_required_parameter", "url", "Missing required parameter: 'url'.")
			continue
		case *l.URL != endpoint:
			fail(n, "invalid_url", "url", "The url %q does not match the batch's endpoint %q.", *l.URL, endpoint)
			continue
		}
		if first, dup := seen[*l.CustomID]; dup {
			fail(n, "duplicate_custom_id", "custom_id", "The custom_id %q is already used on line %d; each line needs a unique custom_id.", *l.CustomID, first)
			continue
		}
		seen[*l.CustomID] = n
		// The body was checked as JSON with the line; only the routing fields are read, as the
		// proxy reads them.
		rt, err := pipeline.Scan(l.Body)
		model, stream := rt.Model, rt.Stream
		switch {
		case len(l.Body) == 0 || l.Body[0] != '{' || err != nil:
			fail(n, "invalid_value", "body", "The body must be a JSON object.")
			continue
		case model == "":
			fail(n, "missing_required_parameter", "body.model", "Missing required parameter: 'body.model'.")
			continue
		case stream:
			fail(n, "invalid_value", "body.stream", "Streaming is not supported in a batch.")
			continue
		case in.model == "":
			in.model = model
		case model != in.model:
			fail(n, "mismatched_model", "body.model", "The model %q differs from %q on earlier lines; a batch runs one model.", model, in.model)
			continue
		}
		in.n++
		if each != nil {
			if err := each(Line{CustomID: *l.CustomID, Body: l.Body}); err != nil {
				return input{}, nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			fail(n+1, "line_too_long", "", "Line %d is longer than %d bytes.", n+1, maxLineBytes)
		} else {
			return input{}, nil, fmt.Errorf("reading the input file: %w", err)
		}
	}
	if in.n == 0 && len(errs) == 0 {
		errs = append(errs, batchstate.ErrorEntry{Code: "empty_file", Message: "The input file holds no requests."})
	}
	if len(errs) > 0 {
		return input{}, errs, nil
	}
	in.sum = h.Sum32()
	return in, nil, nil
}

// errInputChanged: a read of an input file found it other than its validation did.
var errInputChanged = errors.New("the input file changed since it was validated")

// readLines reads again an input file that scanInput accepted as want, handing each its lines in
// order, and checks that it holds the same bytes. It decodes only what a chunk carries (a
// dispatch reads every line of a large file, and most of the validation's work need not be done
// twice), yet it never hands on a line that is not valid JSON with a custom_id and an object
// body: a file that changed stops the read there with errInputChanged, or, if every line still
// reads, at the end (the lines handed on came from a file that changed: the caller does not count
// them as done). Each's error ends the read and comes back as it is.
func readLines(r io.Reader, want input, maxLineBytes int, each func(Line) error) error {
	h := crc32.New(crcTable)
	sc := bufio.NewScanner(io.TeeReader(r, h))
	sc.Buffer(make([]byte, 0, min(64<<10, maxLineBytes)), maxLineBytes)
	changed := func(line int, what string) error {
		return fmt.Errorf("%w: line %d %s", errInputChanged, line, what)
	}
	n, count := 0, 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if count++; count > want.n {
			return changed(n, fmt.Sprintf("is past the %d requests the file held", want.n))
		}
		// A line quickLine takes is valid JSON: it walks all of it with jsonwire's scanner, which
		// accepts exactly what json.Valid does. Any other line is judged by encoding/json.
		id, body, ok := quickLine(raw)
		if ok {
			body = bytes.Clone(body) // raw is the scanner's buffer
		} else {
			if !json.Valid(raw) {
				return changed(n, "is not valid JSON")
			}
			var l inputLine
			if err := json.Unmarshal(raw, &l); err != nil || l.CustomID == nil {
				return changed(n, "has no custom_id")
			}
			id, body = *l.CustomID, l.Body
		}
		if id == "" || len(body) == 0 || body[0] != '{' {
			return changed(n, "has no custom_id or no object body")
		}
		if err := each(Line{CustomID: id, Body: body}); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return changed(n+1, "is too long")
		}
		return fmt.Errorf("reading the input file: %w", err)
	}
	if count != want.n || h.Sum32() != want.sum {
		return fmt.Errorf("%w: %d requests, checksum %08x; validated: %d, %08x", errInputChanged, count, h.Sum32(), want.n, want.sum)
	}
	return nil
}

// quickLine finds the custom_id and the body of raw, a JSON line, without decoding anything
// else, checking all of it as json.Valid does; body is raw's bytes. ok is false, and the caller
// judges and decodes raw with encoding/json, where raw is not valid JSON and wherever
// encoding/json could read it differently from a plain byte match: a key that is escaped or not
// ASCII (encoding/json matches keys case-insensitively, Unicode folding included), a key that
// differs from custom_id or body only in case, either field twice (the last one wins), a
// custom_id that is not a plain ASCII string (escapes, invalid UTF-8), anything but an object.
func quickLine(raw []byte) (id string, body []byte, ok bool) {
	s := jsonwire.NewScanner(raw, jsonwire.Options{})
	if s.EnterObject() != nil {
		return "", nil, false
	}
	haveID, haveBody := false, false
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return "", nil, false
		}
		if !more {
			break
		}
		if !key.Plain() {
			return "", nil, false
		}
		v, err := s.ReadValue()
		if err != nil {
			return "", nil, false
		}
		switch k := key.Contents(raw); {
		case string(k) == "custom_id":
			if haveID || v.Kind != jsonwire.String || !v.Plain() {
				return "", nil, false
			}
			id, haveID = string(v.Contents(raw)), true
		case string(k) == "body":
			if haveBody {
				return "", nil, false
			}
			body, haveBody = v.Raw(raw), true
		case bytes.EqualFold(k, []byte("custom_id")) || bytes.EqualFold(k, []byte("body")):
			return "", nil, false
		}
	}
	if s.Finish() != nil {
		return "", nil, false
	}
	return id, body, haveID && haveBody
}

// jsonProblem words a JSON error without Go type names.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q has the wrong type (%s)", te.Field, te.Value)
	}
	return err.Error()
}
