package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nativeUpstream is a vLLM-like server that serves model natively at /v1/messages and records the
// headers of the last Messages request.
type nativeUpstream struct {
	URL  string
	mu   sync.Mutex
	last http.Header
}

func startNativeUpstream(t *testing.T, model string) *nativeUpstream {
	u := &nativeUpstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"vllm"}]}`, model)
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_n","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`, model)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	u.URL = hs.URL
	return u
}

func (u *nativeUpstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// A client's credentials are for the gateway. With API keys off and no upstream headers, they
// used to reach every upstream: an Anthropic client's x-api-key became "Authorization: Bearer
// sk-ant-..." to an OpenAI-protocol server, and an OpenAI client's Authorization and cookies went
// to whichever upstream served the model. Now an upstream gets a client's credentials only with
// forward_client_auth, and then exactly as sent: never one provider's key in another's header.
func TestSecurityCredentialsStayWithTheClient(t *testing.T) {
	plain := openaitest.Start(t, "plain", "llama")
	fwd := openaitest.Start(t, "fwd", "fwd-model")
	nativePlain := startNativeUpstream(t, "native-plain")
	nativeFwd := startNativeUpstream(t, "native-fwd")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: plain, url: %s, type: vllm, check_interval: 1h}
  - {name: fwd, url: %s, type: vllm, check_interval: 1h, forward_client_auth: true, headers: {X-Tenant: t1}}
  - {name: nplain, url: %s, type: vllm, check_interval: 1h}
  - {name: nfwd, url: %s, type: vllm, check_interval: 1h, forward_client_auth: true}
models:
  native-plain: {messages: native}
  native-fwd: {messages: native}
`, plain.URL, fwd.URL, nativePlain.URL, nativeFwd.URL), "llama")
	for _, m := range []string{"fwd-model", "native-plain", "native-fwd"} {
		require.Eventually(t, func() bool { code, _ := getWithKey(t, addr, "/v1/models/"+m, ""); return code == http.StatusOK },
			10*time.Second, 10*time.Millisecond, m)
	}
	base := "http://" + addr
	creds := []string{"Authorization", "Bearer sk-openai-client", "Cookie", "session=abc", "X-Api-Key", "sk-ant-client",
		"X-Auth-Token", "tok-client", "Proxy-Authorization", "Basic cHJveHk6cHc=", "Api-Key", "azure-client",
		"X-Goog-Api-Key", "goog-client", "X-Other", "kept"}
	chat := func(model string) []byte {
		return []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`)
	}
	messages := func(model string) []byte {
		return []byte(`{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	}
	anthropicHdr := []string{"X-Api-Key", "sk-ant-client", "Anthropic-Version", "2023-06-01", "Content-Type", "application/json"}

	// An OpenAI client's credential headers reach no upstream that was not told to take them.
	r := send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", chat("llama"), append(creds, "Content-Type", "application/json")...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	h := plain.LastHeader()
	for _, k := range []string{"Authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "Proxy-Authorization", "Api-Key", "X-Goog-Api-Key"} {
		assert.Empty(t, h.Get(k), "%s stays at the gateway", k)
	}
	assert.Equal(t, "kept", h.Get("X-Other"), "other headers still pass")

	// An Anthropic client's key, translated to OpenAI chat: never an OpenAI bearer token.
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", messages("llama"), anthropicHdr...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Empty(t, plain.LastHeader().Get("Authorization"), "x-api-key is not sent on as Authorization")
	assert.Empty(t, plain.LastHeader().Get("X-Api-Key"))

	// forward_client_auth: the client's own headers, as sent; the endpoint's configured ones too.
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", chat("fwd-model"), append(creds, "Content-Type", "application/json")...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	h = fwd.LastHeader()
	assert.Equal(t, "Bearer sk-openai-client", h.Get("Authorization"))
	assert.Equal(t, "session=abc", h.Get("Cookie"))
	assert.Equal(t, "tok-client", h.Get("X-Auth-Token"))
	assert.Empty(t, h.Get("Proxy-Authorization"), "hop-by-hop: never forwarded")
	assert.Equal(t, "t1", h.Get("X-Tenant"))
	// ...but a translated Anthropic request still carries no Anthropic key in an OpenAI header.
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", messages("fwd-model"),
		append(anthropicHdr, "Authorization", "Bearer sk-ant-oauth", "Cookie", "c=1", "X-Auth-Token", "t")...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	for _, k := range []string{"Authorization", "X-Api-Key", "Cookie", "X-Auth-Token"} {
		assert.Empty(t, fwd.LastHeader().Get(k), "an Anthropic client's %s never reaches an OpenAI upstream", k)
	}

	// A native Messages request: the upstream speaks Anthropic's protocol, so a forwarding
	// endpoint gets x-api-key as sent; a plain one nothing.
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", messages("native-fwd"), anthropicHdr...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "sk-ant-client", nativeFwd.lastHeader().Get("X-Api-Key"))
	assert.Empty(t, nativeFwd.lastHeader().Get("Authorization"), "not translated")
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", messages("native-plain"), anthropicHdr...)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Empty(t, nativePlain.lastHeader().Get("X-Api-Key"))
	assert.Empty(t, nativePlain.lastHeader().Get("Authorization"))
}

// A config that would forward clients' credentials where they are the gateway's keys (API keys on),
// to a kserve endpoint, or behind a response cache that cannot tell clients apart, is refused at
// load, naming the endpoint.
func TestSecurityForwardClientAuthConfig(t *testing.T) {
	_, err := ParseConfig("test.yaml", []byte(fmt.Sprintf(`
upstreams:
  - {name: up, url: http://127.0.0.1:1, type: vllm, forward_client_auth: true}
auth:
  keys:
    - {name: user, sha256: %s}
`, guard.HashKey(secUserKey))))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `endpoint "up": forward_client_auth: cannot be used with API keys`)
	_, err = ParseConfig("test.yaml", []byte(`
upstreams:
  - {name: triton, url: http://127.0.0.1:1, type: kserve, forward_client_auth: true}
`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forward_client_auth")

	// Without keys the response cache cannot tell clients apart: an upstream that checks each
	// client's own credential cannot sit behind it.
	_, err = ParseConfig("test.yaml", []byte(`
upstreams:
  - {name: up, url: http://127.0.0.1:1, type: vllm, forward_client_auth: true}
models:
  llama: {cache: {mode: exact}}
`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `models.llama.cache: cannot be used with endpoint "up"'s forward_client_auth`)
	_, err = ParseConfig("test.yaml", []byte(`
upstreams:
  - {name: up, url: http://127.0.0.1:1, type: vllm, forward_client_auth: true, models: [other]}
  - {name: up2, url: http://127.0.0.1:2, type: vllm}
models:
  llama: {cache: {mode: exact}}
`))
	require.NoError(t, err, "an endpoint limited to other models is no concern of llama's cache")
}
