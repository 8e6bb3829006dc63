package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/infergate/infergate/adapters/batch/batchstate"
	"github.com/infergate/infergate/adapters/openai"
)

// Endpoints a batch may run, as OpenAI's batch API names them.
var endpoints = map[string]bool{
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/embeddings":       true,
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

// parsed is a validated input file.
type parsed struct {
	model string
	lines []Line
}

// parseInput reads an input file for a batch of endpoint and validates every line: well-formed
// JSON, a unique custom_id, method POST, the batch's url, a body naming the model (one model per
// file), no streaming. It returns every line, or the errors (line-numbered, at most
// maxReportedErrors) that fail the batch; nothing runs unless the whole file is valid.
func parseInput(r io.Reader, endpoint string, maxLines, maxLineBytes int) (*parsed, []batchstate.ErrorEntry, error) {
	var (
		p    = &parsed{}
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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, maxLineBytes)), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue // blank lines (a trailing newline, say) hold no request
		}
		if len(p.lines) >= maxLines {
			fail(n, "too_many_requests", "", "The input file has more than %d requests.", maxLines)
			break
		}
		var in inputLine
		if err := json.Unmarshal(raw, &in); err != nil {
			fail(n, "invalid_json_line", "", "This line is not parseable as valid JSON: %v.", jsonProblem(err))
			continue
		}
		switch {
		case in.CustomID == nil || *in.CustomID == "":
			fail(n, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
			continue
		case len(*in.CustomID) > maxCustomIDBytes:
			fail(n, "invalid_value", "custom_id", "custom_id is longer than %d bytes.", maxCustomIDBytes)
			continue
		case in.Method == nil:
			fail(n, "missing_required_parameter", "method", "Missing required parameter: 'method'.")
			continue
		case *in.Method != "POST":
			fail(n, "invalid_value", "method", "Invalid method %q: only POST is supported.", *in.Method)
			continue
		case in.URL == nil:
			fail(n, "missing_required_parameter", "url", "Missing required parameter: 'url'.")
			continue
		case *in.URL != endpoint:
			fail(n, "invalid_url", "url", "The url %q does not match the batch's endpoint %q.", *in.URL, endpoint)
			continue
		}
		if first, dup := seen[*in.CustomID]; dup {
			fail(n, "duplicate_custom_id", "custom_id", "The custom_id %q is already used on line %d; each line needs a unique custom_id.", *in.CustomID, first)
			continue
		}
		seen[*in.CustomID] = n
		// The body was checked as JSON with the line; only the routing fields are read, as the
		// proxy reads them.
		model, stream, err := openai.ScanModel(in.Body)
		switch {
		case len(in.Body) == 0 || in.Body[0] != '{' || err != nil:
			fail(n, "invalid_value", "body", "The body must be a JSON object.")
			continue
		case model == "":
			fail(n, "missing_required_parameter", "body.model", "Missing required parameter: 'body.model'.")
			continue
		case stream:
			fail(n, "invalid_value", "body.stream", "Streaming is not supported in a batch.")
			continue
		case p.model == "":
			p.model = model
		case model != p.model:
			fail(n, "mismatched_model", "body.model", "The model %q differs from %q on earlier lines; a batch runs one model.", model, p.model)
			continue
		}
		p.lines = append(p.lines, Line{CustomID: *in.CustomID, Body: in.Body})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			fail(n+1, "line_too_long", "", "Line %d is longer than %d bytes.", n+1, maxLineBytes)
		} else {
			return nil, nil, fmt.Errorf("reading the input file: %w", err)
		}
	}
	if len(p.lines) == 0 && len(errs) == 0 {
		errs = append(errs, batchstate.ErrorEntry{Code: "empty_file", Message: "The input file holds no requests."})
	}
	if len(errs) > 0 {
		return nil, errs, nil
	}
	return p, nil, nil
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
