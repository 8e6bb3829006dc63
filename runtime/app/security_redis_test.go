package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frozenBound is how long a route may take to answer while Redis hangs: its Redis calls are
// bounded (2 s at most), so an answer within it is one that did not wait for Redis.
const frozenBound = 8 * time.Second

// With Redis frozen (its traffic held, as SIGSTOP or a network dropping packets would: no
// connection refused, no answer), every admin and API route that touches Redis answers within a
// bound, in its protocol's shape: a 503 with Retry-After (OpenAI's error object under /v1 and
// /admin/cache, Connect's for the registry), or a 200 where the route is designed to go on
// without Redis (the response cache is bypassed); routes that need no Redis keep working. Once
// Redis thaws, everything works again. Before, DELETE /admin/cache waited for Redis as long as
// the client did (no answer after 60 s).
//
// Two gateways share the frozen Redis: the first has the response cache, sessions, the batch API
// and the backend registry in Redis; the second checks API keys in Redis and rate limits through
// it (with failure: closed), which, in front of every route, would hide the first's.
func TestSecurityRedisFrozen(t *testing.T) {
	rs := redistest.Start(t)
	px := redistest.StartProxy(t, rs.Addr)
	up := openaitest.Start(t, "up", "llama")
	base := "http://" + startInProcess(t, secureConfig(t, up.URL, fmt.Sprintf(`builtin_models: false
redis: {addr: %s}
models:
  llama: {cache: {mode: exact}, session: {ttl: 1h}}
`, px.Addr)))

	const redisKey = "sk-sec-redis-5d1e7f3a2b"
	rc := rs.NewClient(t)
	require.NoError(t, rc.Do(context.Background(), rc.B().Hset().Key("b:{keys}").FieldValue().
		FieldValue(guard.HashKey(redisKey), `{"name":"rk","models":["llama"]}`).Build()).Error())
	other := "http://" + startInProcess(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm}
redis: {addr: %s, prefix: b}
registry: {disabled: true}
batch: {disabled: true}
auth:
  keys:
    - {name: ops, sha256: %s, admin: true}
    - {name: user, sha256: %s, models: [llama]}
  redis_keys: true
limits: {per_key: {requests_per_minute: 100000}, failure: closed}
`, up.URL, px.Addr, guard.HashKey(secAdminKey), guard.HashKey(secUserKey)))

	client := &http.Client{Timeout: 15 * time.Second} // a route that hangs fails, not the test
	user := []string{"Authorization", "Bearer " + secUserKey, "Content-Type", "application/json"}
	admin := []string{"Authorization", "Bearer " + secAdminKey, "Content-Type", "application/json"}
	cached := []byte(`{"model":"llama","temperature":0,"messages":[{"role":"user","content":"frozen?"}]}`)
	chat := []byte(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)

	// works sends a request until it is answered want: a Redis call slower than its bound (a
	// loaded test machine, connections being replaced after the thaw) fails a request alone.
	works := func(name string, method, url string, body []byte, want int, header ...string) secResponse {
		t.Helper()
		var last secResponse
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if last = send(t, client, method, url, body, header...); last.status == want {
				return last
			}
		}
		require.Failf(t, "not working", "%s: %d %s", name, last.status, last.body)
		return last
	}

	// What the frozen routes need, made while Redis answers.
	r := works("POST /v1/sessions", http.MethodPost, base+"/v1/sessions", []byte(`{"model":"llama"}`), http.StatusCreated, user...)
	var sess struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &sess))
	turn := append([]string{"X-Infergate-Session-Id", sess.ID}, user...)
	works("a session turn", http.MethodPost, base+"/v1/chat/completions", chat, http.StatusOK, turn...)
	fileID := uploadBatchFile(t, base, secUserKey, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"llama","messages":[]}}`+"\n")
	r = works("POST /v1/batches", http.MethodPost, base+"/v1/batches",
		[]byte(`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), http.StatusOK, user...)
	var batch struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &batch))
	works("rate-limited chat", http.MethodPost, other+"/v1/chat/completions", chat, http.StatusOK, user...)

	type check struct {
		method, url string
		body        []byte
		header      []string
		status      int    // 503 unless set
		code        string // the error's code; "unavailable" is Connect's
	}
	checks := map[string]check{
		"DELETE /admin/cache":    {http.MethodDelete, base + "/admin/cache", nil, admin, 0, "cache_unavailable"},
		"DELETE /admin/cache?m":  {http.MethodDelete, base + "/admin/cache?model=llama", nil, admin, 0, "cache_unavailable"},
		"GET /admin/guard":       {http.MethodGet, base + "/admin/guard", nil, admin, http.StatusOK, ""},
		"registry ListBackends":  {http.MethodPost, base + "/infergate.registry.v1.RegistryService/ListBackends", []byte(`{}`), admin, 0, "unavailable"},
		"registry Heartbeat":     {http.MethodPost, base + "/infergate.registry.v1.RegistryService/Heartbeat", []byte(`{"lease_id":"0123456789abcdef0123456789abcdef"}`), admin, 0, "unavailable"},
		"chat, cache bypassed":   {http.MethodPost, base + "/v1/chat/completions", cached, user, http.StatusOK, ""},
		"chat, a session turn":   {http.MethodPost, base + "/v1/chat/completions", chat, turn, 0, "session_store_unavailable"},
		"POST /v1/sessions":      {http.MethodPost, base + "/v1/sessions", []byte(`{"model":"llama"}`), user, 0, "session_store_unavailable"},
		"GET /v1/sessions/id":    {http.MethodGet, base + "/v1/sessions/" + sess.ID, nil, user, 0, "session_store_unavailable"},
		"DELETE /v1/sessions/id": {http.MethodDelete, base + "/v1/sessions/" + sess.ID, nil, user, 0, "session_store_unavailable"},
		"GET /v1/batches":        {http.MethodGet, base + "/v1/batches", nil, user, 0, "state_unavailable"},
		"GET /v1/batches/id":     {http.MethodGet, base + "/v1/batches/" + batch.ID, nil, user, 0, "state_unavailable"},
		"POST /v1/batches": {http.MethodPost, base + "/v1/batches",
			[]byte(`{"input_file_id":"` + fileID + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`), user, 0, "state_unavailable"},
		"POST /v1/batches/id/cancel": {http.MethodPost, base + "/v1/batches/" + batch.ID + "/cancel", nil, user, 0, "state_unavailable"},
		"GET /v1/files":              {http.MethodGet, base + "/v1/files", nil, user, http.StatusOK, ""},
		"GET /v1/files/id":           {http.MethodGet, base + "/v1/files/" + fileID, nil, user, http.StatusOK, ""},
		"DELETE /v1/files/id":        {http.MethodDelete, base + "/v1/files/" + fileID, nil, user, 0, "state_unavailable"},
		"rate-limited chat":          {http.MethodPost, other + "/v1/chat/completions", chat, user, 0, "rate_limiter_unavailable"},
		"a key kept in Redis": {http.MethodPost, other + "/v1/chat/completions", chat,
			[]string{"Authorization", "Bearer " + redisKey, "Content-Type", "application/json"}, 0, ""},
	}

	px.Freeze()
	t.Run("frozen", func(t *testing.T) {
		for name, c := range checks {
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each waits for its own Redis calls' bounds; together, the longest's
				start := time.Now()
				r := send(t, client, c.method, c.url, c.body, c.header...)
				took := time.Since(start)
				assert.Less(t, took, frozenBound, "answers within a bound, not when Redis thaws")
				want := cmp.Or(c.status, http.StatusServiceUnavailable)
				require.Equal(t, want, r.status, r.body)
				if want == http.StatusOK {
					if strings.Contains(name, "cache") {
						assert.Contains(t, r.header.Get("X-Infergate-Cache"), "bypass", "the cache is bypassed, not waited for")
					}
					return
				}
				secs, err := strconv.Atoi(r.header.Get("Retry-After"))
				require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
				assert.Positive(t, secs)
				var openAI struct {
					Error *struct {
						Message string `json:"message"`
						Code    string `json:"code"`
					} `json:"error"`
				}
				var connectErr struct{ Code, Message string }
				switch {
				case strings.Contains(c.url, "RegistryService"):
					require.NoError(t, json.Unmarshal([]byte(r.body), &connectErr), r.body)
					assert.Equal(t, c.code, connectErr.Code, r.body)
					assert.NotEmpty(t, connectErr.Message)
				default:
					require.NoError(t, json.Unmarshal([]byte(r.body), &openAI), r.body)
					require.NotNil(t, openAI.Error, r.body)
					assert.NotEmpty(t, openAI.Error.Message)
					if c.code != "" {
						assert.Equal(t, c.code, openAI.Error.Code, r.body)
					}
				}
			})
		}
	})
	px.Thaw()

	// Everything works again, once the connections the frozen calls left behind are replaced.
	works("DELETE /admin/cache", http.MethodDelete, base+"/admin/cache", nil, http.StatusOK, admin...)
	works("registry", http.MethodPost, base+"/infergate.registry.v1.RegistryService/ListBackends", []byte(`{}`), http.StatusOK, admin...)
	// A new session: what the frozen calls sent may yet have reached Redis at the thaw, after
	// their callers were answered, deleting the first session or holding its turn lock for its
	// lease (30 s).
	r = works("POST /v1/sessions", http.MethodPost, base+"/v1/sessions", []byte(`{"model":"llama"}`), http.StatusCreated, user...)
	require.NoError(t, json.Unmarshal([]byte(r.body), &sess))
	works("a session turn", http.MethodPost, base+"/v1/chat/completions", chat, http.StatusOK,
		append([]string{"X-Infergate-Session-Id", sess.ID}, user...)...)
	works("GET /v1/batches", http.MethodGet, base+"/v1/batches", nil, http.StatusOK, user...)
	works("GET /v1/batches/id", http.MethodGet, base+"/v1/batches/"+batch.ID, nil, http.StatusOK, user...)
	works("rate-limited chat", http.MethodPost, other+"/v1/chat/completions", chat, http.StatusOK, user...)
	works("a key kept in Redis", http.MethodPost, other+"/v1/chat/completions", chat, http.StatusOK,
		"Authorization", "Bearer "+redisKey, "Content-Type", "application/json")
	assert.Eventually(t, func() bool {
		r := send(t, client, http.MethodPost, base+"/v1/chat/completions", cached, user...)
		return r.status == http.StatusOK && r.header.Get("X-Infergate-Cache") == "hit"
	}, 15*time.Second, 50*time.Millisecond, "the cache stores and answers again")
}
