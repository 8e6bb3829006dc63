package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/store/responsestate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const chatAnswer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

// serve starts h on a real socket and returns a function that sends a request and returns the
// status, headers and body.
func serve(t *testing.T, h http.Handler) func(method, path, body string) (int, http.Header, string) {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func(method, path, body string) (int, http.Header, string) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
}

func errorOf(t *testing.T, body string) (msg, typ, param, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Message, e.Error.Type, param, code
}

// TestBadRequests: what the client must fix gets OpenAI's error object and its status, never a
// 500, and nothing reaches the chat handler.
func TestBadRequests(t *testing.T) {
	var chats atomic.Int64
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chats.Add(1)
		io.WriteString(w, chatAnswer)
	}), MaxBodyBytes: 1 << 10})
	do := serve(t, h)
	for _, c := range []struct {
		method, path, body string
		status             int
		param, code        string
	}{
		{"POST", "/v1/responses", `{"model":`, 400, "", ""},
		{"POST", "/v1/responses", `[1]`, 400, "", ""},
		{"POST", "/v1/responses", `{"model":"m","input":"` + strings.Repeat("x", 2<<10) + `"}`, 413, "", ""},
		{"POST", "/v1/responses", `{"model":"m","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`, 400, "input[0].call_id", ""},
		{"POST", "/v1/responses", `{"model":"m","input":"x","tools":[{"type":"file_search"}]}`, 400, "tools[0].type", "unsupported_value"},
		{"POST", "/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_nope"}`, 400, "previous_response_id", "previous_response_not_found"},
		{"GET", "/v1/responses", "", 405, "", ""},
		{"PUT", "/v1/responses/resp_x", "", 405, "", ""},
		{"GET", "/v1/responses/resp_x", "", 404, "", ""},
		{"GET", "/v1/responses/resp_x/input_items", "", 404, "", ""},
		{"GET", "/v1/responses/resp_x/input_items?limit=0", "", 400, "limit", "invalid_value"},
		{"GET", "/v1/responses/resp_x/input_items?order=up", "", 400, "order", "invalid_value"},
		{"POST", "/v1/responses/resp_x/cancel", "", 404, "", ""},
		{"GET", "/v1/responses/resp_x/other", "", 404, "", ""},
	} {
		status, hdr, body := do(c.method, c.path, c.body)
		assert.Equal(t, c.status, status, "%s %s %.60s: %s", c.method, c.path, c.body, body)
		msg, typ, param, code := errorOf(t, body)
		assert.NotEmpty(t, msg)
		assert.NotEmpty(t, typ)
		assert.Equal(t, c.param, param, "%s %s %.60s", c.method, c.path, c.body)
		if c.code != "" {
			assert.Equal(t, c.code, code)
		}
		assert.Equal(t, "application/json", hdr.Get("Content-Type"))
		if status == http.StatusMethodNotAllowed {
			assert.NotEmpty(t, hdr.Get("Allow"))
		}
	}
	assert.Zero(t, chats.Load())
}

// TestChatErrors: the chat handler's errors reach the client with their status and headers, in
// OpenAI's error shape whatever shape they came in.
func TestChatErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		msg    string
	}{
		{429, `{"error":{"message":"Rate limit reached for key a.","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`, "Rate limit reached for key a."},
		{503, `upstream down`, "Service Unavailable"},
		{400, `{"object":"error","message":"This model's maximum context length is 8 tokens.","type":"BadRequestError","code":400}`, "This model's maximum context length is 8 tokens."},
	} {
		h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		})})
		for _, stream := range []string{"false", "true"} {
			status, hdr, body := serve(t, h)("POST", "/v1/responses", `{"model":"m","input":"x","stream":`+stream+`}`)
			assert.Equal(t, c.status, status)
			assert.Equal(t, "7", hdr.Get("Retry-After"))
			msg, _, _, _ := errorOf(t, body)
			assert.Equal(t, c.msg, msg)
		}
	}
}

// TestStreamCutShort: a chat stream the upstream breaks off ends in response.failed, and the
// connection is cut as the chat handler's would be.
func TestStreamCutShort(t *testing.T) {
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`+"\n\n")
		panic(http.ErrAbortHandler)
	})})
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"x","stream":true}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body) // ends with an error: the connection was cut
	res.Body.Close()
	assert.Contains(t, string(b), "event: response.output_text.delta")
	assert.Contains(t, string(b), "event: response.failed")
	assert.NotContains(t, string(b), "response.completed")
}

// TestCachedAnswerStreamed: a stream request answered whole (the response cache's answer) gets
// the event sequence, and the stored response is the one the events end with.
func TestCachedAnswerStreamed(t *testing.T) {
	st := responsestate.NewMemory(responsestate.MemoryOptions{})
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	}), Store: st})
	do := serve(t, h)
	status, hdr, body := do("POST", "/v1/responses", `{"model":"m","input":"x","stream":true}`)
	require.Equal(t, 200, status, body)
	assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(body, "event: response.created\n"), body)
	assert.Contains(t, body, `"delta":"hi there"`)
	i := strings.LastIndex(body, "event: response.completed\ndata: ")
	require.Positive(t, i, body)
	var ev struct {
		Response json.RawMessage `json:"response"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(body[i+len("event: response.completed\ndata: "):])), &ev))
	var id struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(ev.Response, &id))
	status, _, got := do("GET", "/v1/responses/"+id.ID, "")
	require.Equal(t, 200, status)
	assert.JSONEq(t, string(ev.Response), got)
}

// TestInputItemsPages: input_items lists the request's items, string contents as text parts,
// each with an id, newest first by default, paged by id.
func TestInputItemsPages(t *testing.T) {
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, chatAnswer) })})
	do := serve(t, h)
	status, _, body := do("POST", "/v1/responses", `{"model":"m","input":[{"role":"user","content":"one"},{"type":"message","role":"assistant","content":"two"},{"role":"user","content":[{"type":"input_text","text":"three"}],"id":"msg_mine"}]}`)
	require.Equal(t, 200, status, body)
	var r struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	type page struct {
		Data []struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"data"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}
	get := func(q string) page {
		status, _, body := do("GET", "/v1/responses/"+r.ID+"/input_items"+q, "")
		require.Equal(t, 200, status, body)
		var p page
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		return p
	}
	p := get("")
	require.Len(t, p.Data, 3)
	assert.Equal(t, "msg_mine", p.Data[0].ID, "newest first")
	assert.Equal(t, "message", p.Data[2].Type)
	assert.Equal(t, []string{"input_text", "one"}, []string{p.Data[2].Content[0].Type, p.Data[2].Content[0].Text})
	assert.Equal(t, "output_text", p.Data[1].Content[0].Type)
	assert.False(t, p.HasMore)
	p = get("?order=asc&limit=2")
	require.Len(t, p.Data, 2)
	assert.True(t, p.HasMore)
	assert.Equal(t, "one", p.Data[0].Content[0].Text)
	p = get("?order=asc&limit=2&after=" + *p.LastID)
	require.Len(t, p.Data, 1)
	assert.Equal(t, "msg_mine", p.Data[0].ID)
	assert.False(t, p.HasMore)
	p = get("?order=asc&after=msg_mine")
	assert.Empty(t, p.Data)
	assert.Nil(t, p.FirstID)
	status, _, _ = do("GET", "/v1/responses/"+r.ID+"/input_items?after=msg_other", "")
	assert.Equal(t, 400, status)
}

// downStore is a store that cannot answer.
type downStore struct{}

var errDown = errors.New("connection refused")

func (downStore) Put(context.Context, *responsestate.Record) error { return errDown }
func (downStore) Get(context.Context, string, string) (*responsestate.Record, error) {
	return nil, errDown
}
func (downStore) Delete(context.Context, string, string) error { return errDown }

// TestStoreDown: a store that cannot answer is a 503, never "not found"; a response is still
// answered when it cannot be stored.
func TestStoreDown(t *testing.T) {
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, chatAnswer) }), Store: downStore{}})
	do := serve(t, h)
	status, _, body := do("POST", "/v1/responses", `{"model":"m","input":"x"}`)
	assert.Equal(t, 200, status, body)
	for _, c := range [][2]string{{"GET", "/v1/responses/resp_x"}, {"DELETE", "/v1/responses/resp_x"}, {"POST", "/v1/responses/resp_x/cancel"}} {
		status, _, _ = do(c[0], c[1], "")
		assert.Equal(t, 503, status, c)
	}
	status, _, _ = do("POST", "/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_x"}`)
	assert.Equal(t, 503, status)
}

// TestAutoDiscovery: in auto mode, an endpoint that answers /v1/responses with a bare 404 is
// translated for from then on (the request that found out too); one answering with an error
// object (an unknown model) is not taken for chat-only; a model all of whose endpoints are
// chat-only is translated without asking.
func TestAutoDiscovery(t *testing.T) {
	var native, chats atomic.Int64
	var next atomic.Value
	next.Store("a")
	h := New(Options{
		Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { chats.Add(1); io.WriteString(w, chatAnswer) }),
		Mode: func(string) Mode { return Auto },
		NativeHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			native.Add(1)
			ep := next.Load().(string)
			w.Header().Set(headerEndpoint, ep)
			w.WriteHeader(404)
			if ep == "x" {
				io.WriteString(w, `{"error":{"message":"The model does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)
				return
			}
			io.WriteString(w, `{"detail":"Not Found"}`)
		}),
		Endpoints: func(string) []string { return []string{"a", "b"} },
	})
	do := serve(t, h)
	post := func() int {
		status, _, _ := do("POST", "/v1/responses", `{"model":"m","input":"x"}`)
		return status
	}
	assert.Equal(t, 200, post())
	assert.Equal(t, [2]int64{1, 1}, [2]int64{native.Load(), chats.Load()}, "asked natively, then translated")
	next.Store("b")
	assert.Equal(t, 200, post())
	assert.Equal(t, [2]int64{2, 2}, [2]int64{native.Load(), chats.Load()}, "b was not known yet")
	assert.Equal(t, 200, post())
	assert.Equal(t, [2]int64{2, 3}, [2]int64{native.Load(), chats.Load()}, "both chat-only: translated without asking")

	h.chatOnly = newChatOnly(h.opts.Now)
	next.Store("x")
	assert.Equal(t, 404, post(), "an error object is the answer, not a missing route")
	assert.False(t, h.chatOnly.has("x"))
}

// TestNativeStreamCut: a native stream that ends before its terminal event ends with an error
// event, and nothing is stored.
func TestNativeStreamCut(t *testing.T) {
	st := responsestate.NewMemory(responsestate.MemoryOptions{})
	h := New(Options{
		Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { t.Error("translated") }),
		Mode: func(string) Mode { return Native },
		NativeHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: response.created\ndata: %s\n\n", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_n","object":"response","status":"in_progress","output":[],"store":false}}`)
		}),
		Endpoints: func(string) []string { return []string{"a"} },
		Store:     st,
	})
	status, _, body := serve(t, h)("POST", "/v1/responses", `{"model":"m","input":"x","stream":true}`)
	assert.Equal(t, 200, status)
	assert.Contains(t, body, `"store":true`, "lifecycle events say what the client asked")
	assert.True(t, strings.HasSuffix(body, "\n\n"))
	assert.Contains(t, body, "event: error\n")
	_, err := st.Get(context.Background(), "", "resp_n")
	assert.ErrorIs(t, err, responsestate.ErrNotFound)
}

// TestTruncationAuto: with truncation auto, a conversation over the model's context (here: more
// than 5 chat messages, as the gateway's context check or vLLM refuse it) loses its oldest turns
// until it fits, whole turns at a time; with disabled, the refusal is the answer.
func TestTruncationAuto(t *testing.T) {
	var seen []int
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &req))
		seen = append(seen, len(req.Messages))
		if len(req.Messages) > 5 {
			w.WriteHeader(400)
			io.WriteString(w, `{"object":"error","message":"This model's maximum context length is 64 tokens. However, your request has 80 input tokens.","type":"BadRequestError","code":400}`)
			return
		}
		if req.Messages[0].Role != "user" {
			t.Errorf("a conversation cut mid-turn: %s", b)
		}
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%d"},"finish_reason":"stop"}]}`, len(req.Messages))
	})})
	do := serve(t, h)
	prev := ""
	post := func(input, truncation string) (int, string) {
		body := `{"model":"m","input":"` + input + `"`
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		if truncation != "" {
			body += `,"truncation":"` + truncation + `"`
		}
		status, _, res := do("POST", "/v1/responses", body+"}")
		if status == 200 {
			var r struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(res), &r))
			prev = r.ID
		}
		return status, res
	}
	for _, in := range []string{"one", "two", "three"} {
		status, res := post(in, "")
		require.Equal(t, 200, status, res)
	}
	status, res := post("four", "disabled")
	assert.Equal(t, 400, status, "disabled: the model's refusal")
	assert.Contains(t, res, "maximum context length")
	seen = nil
	status, res = post("four", "auto")
	require.Equal(t, 200, status, res)
	assert.Equal(t, []int{7, 5}, seen, "one turn left out")
	assert.Contains(t, res, `"truncation":"auto"`)
	seen = nil
	status, res = post("five", "auto")
	require.Equal(t, 200, status, res)
	assert.Equal(t, []int{7, 5}, seen, "the stored conversation is the truncated one")
}

// TestBackground: background true answers at once with the response queued; a poll finds it
// completed with its answer; cancel stops a run, on the replica that has it and, through the
// shared store, on another; a synchronous response cannot be cancelled; background with store
// false or stream is refused.
func TestBackground(t *testing.T) {
	st := responsestate.NewMemory(responsestate.MemoryOptions{})
	release := make(chan struct{})
	chat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "slow") {
			select {
			case <-r.Context().Done():
				return
			case <-release:
			}
		}
		io.WriteString(w, chatAnswer)
	})
	a, b := New(Options{Chat: chat, Store: st}), New(Options{Chat: chat, Store: st})
	doA, doB := serve(t, a), serve(t, b)
	type resp struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		Background bool   `json:"background"`
		Output     []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	decode := func(body string) resp {
		var r resp
		require.NoError(t, json.Unmarshal([]byte(body), &r), body)
		return r
	}
	poll := func(do func(string, string, string) (int, http.Header, string), id, want string) resp {
		var r resp
		require.Eventually(t, func() bool {
			status, _, body := do("GET", "/v1/responses/"+id, "")
			r = decode(body)
			return status == 200 && r.Status == want
		}, 5*time.Second, 10*time.Millisecond, "status %s", want)
		return r
	}

	status, _, body := doA("POST", "/v1/responses", `{"model":"m","input":"x","background":true}`)
	require.Equal(t, 200, status, body)
	q := decode(body)
	assert.Equal(t, "queued", q.Status)
	assert.True(t, q.Background)
	done := poll(doA, q.ID, "completed")
	assert.Equal(t, "hi there", done.Output[0].Content[0].Text)
	assert.True(t, done.Background)
	status, _, body = doA("POST", "/v1/responses/"+q.ID+"/cancel", "")
	assert.Equal(t, 200, status)
	assert.Equal(t, "completed", decode(body).Status, "an ended response is answered as it is")

	// Cancelled on the replica that runs it.
	_, _, body = doA("POST", "/v1/responses", `{"model":"m","input":"slow","background":true}`)
	slow := decode(body)
	poll(doA, slow.ID, "in_progress")
	status, _, body = doA("POST", "/v1/responses/"+slow.ID+"/cancel", "")
	require.Equal(t, 200, status, body)
	assert.Equal(t, "cancelled", decode(body).Status)
	poll(doB, slow.ID, "cancelled")

	// Cancelled on another replica: the run sees the mark and stops.
	_, _, body = doA("POST", "/v1/responses", `{"model":"m","input":"slow again","background":true}`)
	other := decode(body)
	poll(doA, other.ID, "in_progress")
	status, _, body = doB("POST", "/v1/responses/"+other.ID+"/cancel", "")
	require.Equal(t, 200, status, body)
	assert.Equal(t, "cancelled", decode(body).Status)
	require.Eventually(t, func() bool { return a.bg.get(other.ID) == nil }, 5*time.Second, 10*time.Millisecond, "the run stopped")
	poll(doA, other.ID, "cancelled")
	close(release)

	_, _, body = doA("POST", "/v1/responses", `{"model":"m","input":"x"}`)
	status, _, body = doA("POST", "/v1/responses/"+decode(body).ID+"/cancel", "")
	assert.Equal(t, 400, status)
	assert.Contains(t, body, "Cannot cancel a synchronous response.")
	status, _, _ = doA("POST", "/v1/responses", `{"model":"m","input":"x","background":true,"store":false}`)
	assert.Equal(t, 400, status)
	status, _, _ = doA("POST", "/v1/responses", `{"model":"m","input":"x","background":true,"stream":true}`)
	assert.Equal(t, 400, status)
}

// TestReplay: GET ?stream=true answers a stored response as the events that make it, from
// starting_after on: lifecycle, each item's added/done, its parts' deltas, the terminal event
// with the stored response.
func TestReplay(t *testing.T) {
	h := New(Options{Chat: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"sunny","reasoning_content":"think","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`)
	})})
	do := serve(t, h)
	status, _, body := do("POST", "/v1/responses", `{"model":"m","input":"x"}`)
	require.Equal(t, 200, status, body)
	var r struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	status, hdr, events := do("GET", "/v1/responses/"+r.ID+"?stream=true", "")
	require.Equal(t, 200, status, events)
	assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
	var types []string
	for i, ev := range strings.Split(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		typ, data, ok := strings.Cut(strings.TrimPrefix(ev, "event: "), "\ndata: ")
		require.True(t, ok, ev)
		var e struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &e), data)
		assert.Equal(t, typ, e.Type)
		assert.Equal(t, i, e.Seq)
		types = append(types, typ)
	}
	assert.Equal(t, []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}, types)
	_, _, tail := do("GET", "/v1/responses/"+r.ID+"?stream=true&starting_after=17", "")
	assert.True(t, strings.HasPrefix(tail, "event: response.completed\n"), tail)
	status, _, _ = do("GET", "/v1/responses/"+r.ID+"?stream=true&starting_after=x", "")
	assert.Equal(t, 400, status)
}
