package batch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/batch"
	"github.com/stretchr/testify/require"
)

// errorLog records the messages logged at Error level or above, which no bad input may cause:
// an ERROR line is for our own bugs.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// rawRequest sends head and body over a connection of its own, as a client that may stop
// mid-body would. With halfClose the client then closes its side for writing and reads the
// answer (what a client whose upload was cut short by a proxy gets); otherwise it closes the
// connection at once, as a client that goes away does, and gets no answer.
func rawRequest(t *testing.T, baseURL, head string, body []byte, halfClose bool) (int, string) {
	t.Helper()
	u, err := url.Parse(baseURL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(15*time.Second)))
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	_, _ = conn.Write(body) // the server may answer and close before it read everything
	if !halfClose {
		return 0, ""
	}
	_ = conn.(*net.TCPConn).CloseWrite() // fails when the server has answered and closed already
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// requireInvalid checks a 400 with OpenAI's error object of type invalid_request_error.
func requireInvalid(t *testing.T, status int, body, what string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, status, "%s: %s", what, body)
	var er struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &er), "%s: %s", what, body)
	require.Equal(t, "invalid_request_error", er.Error.Type, what)
	require.NotEmpty(t, er.Error.Message, what)
}

// Truncated and malformed multipart uploads answer 400 with OpenAI's error object, log no
// error, and leave nothing stored, not even a temporary file; a client that goes away mid-upload
// leaves nothing either.
func TestMalformedUploads(t *testing.T) {
	logs := &errorLog{}
	dir := t.TempDir()
	e := startEnv(t, envOptions{service: func(o *batch.Options) { o.Logger = slog.New(logs) }, filesDir: dir})
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[]}}` + "\n"
	purpose := "--X\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
	fileHead := "--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n"
	whole := purpose + fileHead + strings.Repeat(line, 100) + "\r\n--X--\r\n"
	cases := []struct {
		name        string
		contentType string
		body        string
		// declared is the Content-Length announced, when more than the body (a body cut short).
		declared int
	}{
		{name: "cut mid-part", contentType: "multipart/form-data; boundary=X", body: whole[:len(whole)/2], declared: len(whole)},
		{name: "cut in a part's header", contentType: "multipart/form-data; boundary=X", body: purpose + fileHead[:30], declared: len(whole)},
		{name: "file part without its delimiter", contentType: "multipart/form-data; boundary=X", body: purpose + fileHead + line},
		{name: "no closing boundary", contentType: "multipart/form-data; boundary=X", body: purpose + fileHead + line + "\r\n--X\r\n"},
		{name: "boundary the body does not use", contentType: "multipart/form-data; boundary=Y", body: whole},
		{name: "no boundary", contentType: "multipart/form-data", body: whole},
		{name: "empty body", contentType: "multipart/form-data; boundary=X"},
		{name: "garbage", contentType: "multipart/form-data; boundary=X", body: "\x00\xff--X\r\n\r\n\r\n--"},
		{name: "part header too large", contentType: "multipart/form-data; boundary=X",
			body: purpose + "--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\nX-Big: " +
				strings.Repeat("a", 11<<20) + "\r\n\r\n" + line + "\r\n--X--\r\n"},
		{name: "too many part headers", contentType: "multipart/form-data; boundary=X",
			body: purpose + "--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n" +
				strings.Repeat("X-A: b\r\n", 20000) + "\r\n" + line + "\r\n--X--\r\n"},
		{name: "cut after the file, before the boundary", contentType: "multipart/form-data; boundary=X",
			body: purpose + fileHead + line, declared: len(purpose+fileHead+line) + 100},
	}
	for _, tc := range cases {
		declared := max(tc.declared, len(tc.body))
		head := fmt.Sprintf("POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
			tc.contentType, declared)
		status, body := rawRequest(t, e.URL, head, []byte(tc.body), true)
		requireInvalid(t, status, body, tc.name)
	}

	// Clients that go away mid-upload, at several points of the file part.
	for _, cut := range []int{len(purpose) + 10, len(purpose) + len(fileHead) + 5, len(whole) / 2, len(whole) - 3} {
		head := fmt.Sprintf("POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=X\r\nContent-Length: %d\r\n\r\n", len(whole))
		rawRequest(t, e.URL, head, []byte(whole[:cut]), false)
	}

	// A whole upload still works, and is the only file stored: each refused or abandoned upload
	// removed what it had written (the handlers of abandoned ones may still be finishing).
	head := fmt.Sprintf("POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(whole))
	status, body := rawRequest(t, e.URL, head, []byte(whole), true)
	require.Equal(t, http.StatusOK, status, body)
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		return len(entries) == 1
	}, 10*time.Second, 10*time.Millisecond, "one file in the store's directory, no partial one")
	var list struct{ Data []struct{ Bytes int64 } }
	require.Equal(t, http.StatusOK, e.do(t, http.MethodGet, "/v1/files", "", &list))
	require.Len(t, list.Data, 1)
	require.EqualValues(t, 100*len(line), list.Data[0].Bytes)
	require.Empty(t, logs.logged(), "bad uploads are the client's fault: no ERROR")
}

// Malformed JSON bodies of POST /v1/batches answer 400 with OpenAI's error object: truncated,
// wrong types, nested past any sane depth (which must not exhaust the stack or the CPU), cut
// short by the client.
func TestMalformedCreateBatchBodies(t *testing.T) {
	logs := &errorLog{}
	e := startEnv(t, envOptions{service: func(o *batch.Options) { o.Logger = slog.New(logs) }})
	file := e.upload(t, chatLines(1, "m1"))
	good := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, file)
	cases := map[string]string{
		"truncated":             good[:len(good)/2],
		"empty":                 "",
		"not JSON":              "input_file_id=" + file,
		"array":                 "[" + good + "]",
		"id of the wrong type":  `{"input_file_id":5,"endpoint":"/v1/chat/completions","completion_window":"24h"}`,
		"metadata wrong type":   strings.Replace(good, `}`, `,"metadata":{"a":1}}`, 1),
		"metadata not a map":    strings.Replace(good, `}`, `,"metadata":["a"]}`, 1),
		"deep arrays":           strings.Repeat("[", 100_000),
		"deep objects":          strings.Repeat(`{"a":`, 100_000),
		"deep in a field":       strings.Replace(good, `}`, `,"metadata":`+strings.Repeat("[", 100_000)+`}`, 1),
		"too large":             strings.Replace(good, `}`, `,"x":"`+strings.Repeat("a", 2<<20)+`"}`, 1),
		"invalid escape":        `{"input_file_id":"\x"}`,
		"control character":     "{\"input_file_id\":\"a\x01\"}",
		"number out of range":   `{"input_file_id":"a","metadata":{},"x":1e999}`,
		"null":                  "null",
		"wrong type everywhere": `{"input_file_id":[],"endpoint":{},"completion_window":true,"metadata":"x"}`,
	}
	for name, body := range cases {
		head := fmt.Sprintf("POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
		status, answer := rawRequest(t, e.URL, head, []byte(body), true)
		requireInvalid(t, status, answer, name)
	}
	// Cut short by the client: the body announced is longer than what comes.
	head := fmt.Sprintf("POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(good))
	status, answer := rawRequest(t, e.URL, head, []byte(good[:20]), true)
	requireInvalid(t, status, answer, "cut short")

	var list struct{ Data []any }
	require.Equal(t, http.StatusOK, e.do(t, http.MethodGet, "/v1/batches", "", &list))
	require.Empty(t, list.Data, "no batch was created")
	require.Empty(t, logs.logged())
}
