package openai_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFormSpooled: an audio form larger than the memory a form may hold reaches the upstream
// byte for byte (its model field renamed for an endpoint that names the model otherwise, the
// file after it untouched), is sent again, whole, to the next endpoint when the first fails, and
// costs the gateway a small fraction of its size in memory: the rest waits in a temporary file
// that is already unlinked while the request runs, so nothing is left in the spool directory.
// A form past the body limit is a 413, one past what all forms may hold together a 503.
func TestFormSpooled(t *testing.T) {
	spoolDir := t.TempDir()
	var leftovers atomic.Value
	up := &asr{onServed: func() {
		files, _ := os.ReadDir(spoolDir)
		leftovers.Store(len(files))
	}}
	upstreamServer := up.start(t)
	bad, good := upstreamServer("bad", true), upstreamServer("good", false)
	eps := []upstream.Endpoint{
		openaitest.SlowChecks(upstream.Endpoint{Name: "bad", URL: bad.URL, Type: upstream.TypeVLLM, Priority: 1,
			Aliases: map[string]string{"whisper": "whisper-large"}}),
		openaitest.SlowChecks(upstream.Endpoint{Name: "good", URL: good.URL, Type: upstream.TypeVLLM,
			Aliases: map[string]string{"whisper": "whisper-large"}}),
	}
	u, err := openaipool.New(openaipool.Options{Endpoints: eps, Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(u.Close)
	u.Start(context.Background())
	p := openai.NewProxy(u, openai.ProxyOptions{FormMemoryBytes: 64 << 10, SpoolDir: spoolDir})
	mux := http.NewServeMux()
	p.Mount(mux, nil)
	gw := httptest.NewServer(mux)
	t.Cleanup(gw.Close)

	// The file first and the model after it, as openai-go and openai-node write them.
	audio := bytes.Repeat([]byte("RIFF\r\n--b0undary\r\n\r\nwhisper\r\n"), 300_000) // 8.7 MB
	form := func(model string) ([]byte, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.SetBoundary("b0undary-x")
		fw, _ := mw.CreateFormFile("file", "speech.wav")
		fw.Write(audio)
		mw.WriteField("model", model)
		mw.WriteField("language", "en")
		mw.Close()
		return buf.Bytes(), mw.FormDataContentType()
	}
	body, ct := form("whisper")
	want, _ := form("whisper-large")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := http.Post(gw.URL+"/v1/audio/transcriptions", ct, bytes.NewReader(body))
	require.NoError(t, err)
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	runtime.ReadMemStats(&after)
	require.Equal(t, 200, res.StatusCode, string(answer))
	assert.JSONEq(t, `{"text":"good"}`, string(answer))
	assert.EqualValues(t, 1, up.failed.Load(), "the first endpoint heard it and failed")
	assert.EqualValues(t, 1, up.served.Load())
	assert.Equal(t, fmt.Sprintf("%x %d", sha256.Sum256(want), len(want)), up.heard.Load(),
		"the resent form is the client's, byte for byte, with the upstream's model name")
	assert.Equal(t, 0, leftovers.Load(), "the spooled file is unlinked while it is in use")
	files, _ := os.ReadDir(spoolDir)
	assert.Empty(t, files)
	// Everything in this process (client, gateway, both upstreams) allocated a small part of the
	// form's size: the gateway held no copy of it, nor did it read it whole to find the model.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KB for a %d KB form", alloc>>10, len(body)>>10)
	assert.Less(t, alloc, uint64(len(body)/4), "allocated %d bytes for a %d-byte form", alloc, len(body))

	// Over the body limit: refused, and nothing spooled is left.
	small := openai.NewProxy(u, openai.ProxyOptions{MaxBodyBytes: 1 << 20, FormMemoryBytes: 64 << 10, SpoolDir: spoolDir})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.ContentLength = -1 // chunked: found too big while spooling
	m := http.NewServeMux()
	small.Mount(m, nil)
	m.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	files, _ = os.ReadDir(spoolDir)
	assert.Empty(t, files)

	// Past what all forms in flight may hold together: a 503 to retry, not a 413.
	full := openai.NewProxy(u, openai.ProxyOptions{MaxSpoolBytes: 4 << 20, FormMemoryBytes: 64 << 10, SpoolDir: spoolDir})
	m = http.NewServeMux()
	full.Mount(m, nil)
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	m.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, rec.Body.String(), "server_busy")
}

// TestFormStreamed: an audio form that names its model before its file (as curl -F and
// openai-python write it) goes upstream as the client sends it: the upstream reads the file's
// first megabytes while the client still holds the rest back, gets the form byte for byte (the
// model renamed for it), and the gateway allocates a small part of the form's size. Such a form
// goes to a second endpoint only when the first read none of it (it refused the connection);
// an endpoint that read it answers for it, 5xx or not. A second model field after the file is
// refused with OpenAI's error before its header goes on, and the upstream gets a form cut short,
// never one naming another model; so is a form past the body limit, with a 413.
func TestFormStreamed(t *testing.T) {
	up := &asr{progress: make(chan int64, 1024)} // what the good endpoint has read so far
	upstreamServer := up.start(t)
	endpoint := func(name, url string, priority int) upstream.Endpoint {
		return openaitest.SlowChecks(upstream.Endpoint{Name: name, URL: url, Type: upstream.TypeVLLM, Priority: priority,
			Aliases: map[string]string{"whisper": "whisper-large"}})
	}
	gateway := func(opts openai.ProxyOptions, eps ...upstream.Endpoint) string {
		u, err := openaipool.New(openaipool.Options{Endpoints: eps, Logger: quiet()})
		require.NoError(t, err)
		t.Cleanup(u.Close)
		u.Start(context.Background())
		opts.SpoolDir = t.TempDir()
		p := openai.NewProxy(u, opts)
		mux := http.NewServeMux()
		p.Mount(mux, nil)
		gw := httptest.NewServer(mux)
		t.Cleanup(gw.Close)
		return gw.URL
	}
	audio := bytes.Repeat([]byte("RIFF\r\n--b0undary\r\n\r\nwhisper\r\n"), 300_000) // 8.7 MB
	form := func(model string, after ...string) ([]byte, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.SetBoundary("b0undary-x")
		mw.WriteField("model", model)
		mw.WriteField("language", "en")
		fw, _ := mw.CreateFormFile("file", "speech.wav")
		fw.Write(audio)
		for i := 0; i+1 < len(after); i += 2 {
			mw.WriteField(after[i], after[i+1])
		}
		mw.Close()
		return buf.Bytes(), mw.FormDataContentType()
	}
	post := func(url, ct string, body io.Reader) (int, string) {
		res, err := http.Post(url+"/v1/audio/transcriptions", ct, body)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	good := upstreamServer("good", false)
	url := gateway(openai.ProxyOptions{}, endpoint("good", good.URL, 0))
	body, ct := form("whisper")
	want, _ := form("whisper-large")

	// The client sends 3 MB and waits: the upstream must be reading them before it sends more.
	pr, pw := io.Pipe()
	var streamed atomic.Bool
	go func() {
		pw.Write(body[:3<<20])
		select {
		case <-waitFor(up.progress, 2<<20):
			streamed.Store(true)
		case <-time.After(30 * time.Second): // the gateway holds it back: send the rest anyway
		}
		pw.Write(body[3<<20:])
		pw.Close()
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, answer := post(url, ct, pr)
	runtime.ReadMemStats(&after)
	require.Equal(t, 200, code, answer)
	assert.True(t, streamed.Load(), "the upstream read nothing until the whole form had come")
	assert.JSONEq(t, `{"text":"good"}`, answer)
	assert.Equal(t, fmt.Sprintf("%x %d", sha256.Sum256(want), len(want)), up.heard.Load(),
		"the form as the client sent it, with the upstream's model name")
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KB for a %d KB form", alloc>>10, len(body)>>10)
	assert.Less(t, alloc, uint64(len(body)/4), "allocated %d bytes for a %d-byte form", alloc, len(body))

	// A second model field after the file: refused, and the upstream saw a form cut short.
	twice, _ := form("whisper", "model", "whisper-secret")
	up.served.Store(0)
	code, answer = post(url, ct, bytes.NewReader(twice))
	assert.Equal(t, 400, code, answer)
	assert.Contains(t, answer, "duplicate_model")
	assert.Zero(t, up.served.Load(), "no upstream got the whole form")

	// Past the body limit while it streams (no Content-Length): a 413.
	small := gateway(openai.ProxyOptions{MaxBodyBytes: 4 << 20}, endpoint("good", good.URL, 0))
	code, answer = post(small, ct, io.MultiReader(bytes.NewReader(body))) // a plain io.Reader: sent chunked
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, answer)
	assert.Zero(t, up.served.Load())

	// The first endpoint refuses the connection (it stopped after its health check): the
	// untouched form goes to the next.
	gone := upstreamServer("gone", false)
	url = gateway(openai.ProxyOptions{}, endpoint("gone", gone.URL, 1), endpoint("good", good.URL, 0))
	gone.Close()
	code, answer = post(url, ct, bytes.NewReader(body))
	assert.Equal(t, 200, code, answer)
	assert.JSONEq(t, `{"text":"good"}`, answer)
	assert.EqualValues(t, 1, up.served.Load())

	// The first endpoint reads the form and fails: it cannot be sent again, so its 500 is the
	// answer and the next endpoint hears nothing.
	bad := upstreamServer("bad", true)
	url = gateway(openai.ProxyOptions{}, endpoint("bad", bad.URL, 1), endpoint("good", good.URL, 0))
	code, answer = post(url, ct, bytes.NewReader(body))
	assert.Equal(t, 500, code, answer)
	assert.Contains(t, answer, "gpu fell over")
	assert.EqualValues(t, 1, up.failed.Load())
	assert.EqualValues(t, 1, up.served.Load(), "the good endpoint heard only the earlier form")
}

// asr is a fake speech-to-text upstream: it reads each form to its end (hashing it, and
// reporting how much it has read on progress, when set), then answers with its name, or, when
// it fails, a 500.
type asr struct {
	failed, served atomic.Int64
	heard          atomic.Value // "sha256 length" of the last form served
	progress       chan int64
	onServed       func()
}

// start returns a function that starts one such upstream, named, failing or not.
func (a *asr) start(t *testing.T) func(name string, fail bool) *httptest.Server {
	return func(name string, fail bool) *httptest.Server {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, `{"object":"list","data":[{"id":"whisper-large","object":"model"}]}`)
		})
		mux.HandleFunc("POST /v1/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
			h := sha256.New()
			var n int64
			buf := make([]byte, 256<<10)
			for {
				m, err := r.Body.Read(buf)
				h.Write(buf[:m])
				n += int64(m)
				if a.progress != nil && !fail && m > 0 {
					select {
					case a.progress <- n:
					default:
					}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					http.Error(w, err.Error(), 400)
					return
				}
			}
			if fail {
				a.failed.Add(1)
				http.Error(w, `{"error":{"message":"gpu fell over","type":"server_error"}}`, 500)
				return
			}
			a.served.Add(1)
			a.heard.Store(fmt.Sprintf("%x %d", h.Sum(nil), n))
			if a.onServed != nil {
				a.onServed()
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"text":"%s"}`, name)
		})
		s := httptest.NewServer(mux)
		t.Cleanup(s.Close)
		return s
	}
}

// waitFor is closed once progress reports n or more.
func waitFor(progress <-chan int64, n int64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for p := range progress {
			if p >= n {
				close(done)
				return
			}
		}
	}()
	return done
}
