package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
)

// FuzzScanInput: any input file either validates into a model and a count, or fails with
// line-numbered errors; never both, never a panic. A validating read that sees the lines (a
// give-up's) agrees with the validation: it sees as many lines as were counted, each with a
// unique custom_id and a JSON object body naming the one model, or it fails with the validation's
// first error. A dispatch's read of a valid file (readLines) sees the very same lines. An error
// from the caller ends either read with that error.
func FuzzScanInput(f *testing.F) {
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`
	f.Add(good + "\n")
	f.Add(good + "\n" + good + "\n")
	f.Add(strings.Replace(good, `"a"`, `"b"`, 1) + "\n" + good)
	f.Add("{not json\n")
	f.Add("\n\n")
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","stream":true}}`)
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":"{\"model\":\"m\"}"}`)
	f.Add(strings.Replace(good, `"a"`, `"b"`, 1) + "\n" + strings.Replace(good, `"m"`, `"n"`, 1) + "\n{\n")
	f.Fuzz(func(t *testing.T, file string) {
		scan := func(each func(Line) error) (input, []batchstate.ErrorEntry, error) {
			return scanInput(strings.NewReader(file), "/v1/chat/completions", 50, 4096, each)
		}
		in, errs, err := scan(nil)
		if err != nil {
			t.Fatalf("reading from memory failed: %v", err)
		}
		if (in == input{}) == (errs == nil) {
			t.Fatalf("want a model and count or errors, got %+v and %v", in, errs)
		}
		if len(errs) > maxReportedErrors {
			t.Fatalf("%d errors reported", len(errs))
		}
		var lines []Line
		in2, errs2, err := scan(func(l Line) error {
			lines = append(lines, l)
			return nil
		})
		if err != nil {
			t.Fatalf("reading from memory failed: %v", err)
		}
		if errs != nil {
			if !reflect.DeepEqual(errs2, errs[:1]) {
				t.Fatalf("the second read failed with %v, the first with %v", errs2, errs)
			}
			return
		}
		if errs2 != nil || in2 != in || len(lines) != in.n {
			t.Fatalf("the second read saw %+v (%d lines) and %v, the first %+v", in2, len(lines), errs2, in)
		}
		if in.n == 0 || in.n > 50 || in.model == "" {
			t.Fatalf("%d lines of model %q", in.n, in.model)
		}
		seen := map[string]bool{}
		for _, l := range lines {
			if l.CustomID == "" || seen[l.CustomID] {
				t.Fatalf("custom_id %q empty or repeated", l.CustomID)
			}
			seen[l.CustomID] = true
			var body struct{ Model string }
			if !bytes.HasPrefix(l.Body, []byte("{")) || json.Unmarshal(l.Body, &body) != nil || body.Model != in.model {
				t.Fatalf("body %s", l.Body)
			}
		}
		var again []Line
		if err := readLines(strings.NewReader(file), in, 4096, func(l Line) error {
			again = append(again, l)
			return nil
		}); err != nil {
			t.Fatalf("reading the lines again: %v", err)
		}
		if !reflect.DeepEqual(again, lines) {
			t.Fatalf("read again as %q, validated as %q", again, lines)
		}
		stop := errors.New("stop")
		calls := 0
		if _, _, err := scan(func(Line) error { calls++; return stop }); err != stop || calls != 1 {
			t.Fatalf("the caller's error ended the read after %d lines with %v", calls, err)
		}
		calls = 0
		if err := readLines(strings.NewReader(file), in, 4096, func(Line) error { calls++; return stop }); err != stop || calls != 1 {
			t.Fatalf("the caller's error ended the second read after %d lines with %v", calls, err)
		}
	})
}

// FuzzQuickLine: whatever line quickLine reads is valid JSON (readLines checks no other way), and
// encoding/json reads the same custom_id and body from it.
func FuzzQuickLine(f *testing.F) {
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`)
	f.Add(` { "body" : {"a":"}\"{"} , "custom_id" : "x y" , "n": -1.5e3, "t": [true, null, {}] } `)
	f.Add(`{"custom_id":"a","Custom_ID":"b","body":{}}`)
	f.Add(`{"custom_id":"a","body":{},"body":{"x":1}}`)
	f.Add(`{"custom_id":"a\u0062","body":{}}`)
	f.Add(`{"custom_\u0069d":"a","body":{}}`)
	f.Add(`{"custom_id":"é","body":{}}`)
	f.Add(`{"cuſtom_id":"a","body":{}}`)
	f.Add(`{"custom_id":1,"body":{}}`)
	f.Add(`{"custom_id":"a","body":"{}"}`)
	f.Add(`[{"custom_id":"a","body":{}}]`)
	f.Fuzz(func(t *testing.T, line string) {
		raw := []byte(line)
		id, body, ok := quickLine(raw)
		if !json.Valid(raw) {
			if ok {
				t.Fatalf("quickLine read %q, %s from %q, which is not valid JSON", id, body, raw)
			}
			return
		}
		if !ok {
			return
		}
		var want struct {
			CustomID *string         `json:"custom_id"`
			Body     json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("quickLine read %q, %s; encoding/json: %v", id, body, err)
		}
		if want.CustomID == nil || *want.CustomID != id || !bytes.Equal(want.Body, body) {
			t.Fatalf("quickLine read %q, %s; encoding/json %v, %s", id, body, want.CustomID, want.Body)
		}
	})
}

// FuzzDecodeMessages: bus messages that decode satisfy what the worker and collector rely on.
func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"batch":"b","endpoint":"/v1/embeddings","model":"m","lines":[{"custom_id":"a","body":{"model":"m"}}]}`))
	f.Add([]byte(`{"batch":"b","results":[{"custom_id":"a","kind":1,"line":{"x":1}},{"custom_id":"c","kind":3}]}`))
	f.Add([]byte(`{"batch":"b","results":[{"custom_id":"a","kind":9}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeChunk(b); err == nil {
			if c.Batch == "" || !endpoints[c.Endpoint] || len(c.Lines) == 0 {
				t.Fatalf("accepted %+v", c)
			}
		}
		if r, err := decodeResults(b); err == nil {
			for _, l := range r.Results {
				if l.Kind == batchstate.Skipped && len(l.Line) > 0 || l.Kind != batchstate.Skipped && !json.Valid(l.Line) {
					t.Fatalf("accepted %+v", l)
				}
			}
		}
	})
}

// FuzzUploadAndCreateBodies: whatever body and Content-Type POST /v1/files and POST /v1/batches
// get, they answer without a 5xx (a 500 is for our bugs; bad input is a 400) and never panic;
// an upload either is stored whole (200) or leaves nothing stored.
func FuzzUploadAndCreateBodies(f *testing.F) {
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}` + "\n"
	purpose := "--X\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
	fileHead := "--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n"
	whole := purpose + fileHead + line + "\r\n--X--\r\n"
	mp := "multipart/form-data; boundary=X"
	f.Add(mp, []byte(whole))
	f.Add(mp, []byte(whole[:len(whole)/2]))
	f.Add(mp, []byte(purpose+fileHead+line))
	f.Add(mp, []byte(purpose+fileHead+line+"\r\n--X\r\n"))
	f.Add(mp, []byte(purpose+fileHead+line+"\n--X--"))
	f.Add("multipart/form-data; boundary=Y", []byte(whole))
	f.Add("multipart/form-data", []byte(whole))
	f.Add(mp, []byte(purpose+"--X\r\nX-A: "+strings.Repeat("a", 5000)+"\r\n\r\n\r\n--X--"))
	f.Add("application/json", []byte(`{"input_file_id":"file-x","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	f.Add("application/json", []byte(`{"input_file_id":`))
	f.Add("application/json", []byte(`{"input_file_id":5,"metadata":{"a":1}}`))
	f.Add("application/json", []byte(strings.Repeat("[", 20000)))
	f.Add("application/json", []byte(`{"completion_window":"1e999h","metadata":["a"]}`))
	dir := f.TempDir()
	store, err := files.NewDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(Options{Files: store, State: batchstate.NewMemory(), Bus: bus.NewGoChannel(discard), Logger: discard,
		MaxFileBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	mux := http.NewServeMux()
	s.Mount(mux, nil)
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		for _, path := range []string{"/v1/files", "/v1/batches"} {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", contentType)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
			}
			var stored struct{ ID string }
			if path == "/v1/files" && rec.Code == http.StatusOK {
				if err := json.Unmarshal(rec.Body.Bytes(), &stored); err != nil || store.Delete(t.Context(), stored.ID) != nil {
					t.Fatalf("an upload answered 200 but stored no file: %s", rec.Body)
				}
			}
		}
		if list, _, err := store.List(t.Context(), files.ListOptions{}); err != nil || len(list) != 0 {
			t.Fatalf("files left stored: %v %v", list, err)
		}
	})
}
