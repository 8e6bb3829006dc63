package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	openai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAudioRoutes: vLLM's speech-to-text routes through the gateway, as the official Go SDK
// calls them: the multipart form goes to the upstream as it came (the file's bytes, the model
// field), routed on the form's model, under /olla/vllm too; a form naming no model, a model no
// upstream serves and a form that is not one are refused with OpenAI's errors before any
// upstream sees them.
func TestAudioRoutes(t *testing.T) {
	t.Parallel()
	var calls, parsed atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"whisper","object":"model","owned_by":"vllm"}]}`)
	})
	heard := func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		f, hdr, err := r.FormFile("file")
		if err != nil {
			http.Error(w, `{"error":{"message":"no file","type":"invalid_request_error"}}`, 400)
			return
		}
		b, _ := io.ReadAll(f)
		parsed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":"%s heard %d bytes of %s (sum %d) at %s"}`, r.FormValue("model"), len(b), hdr.Filename, sum(b), r.URL.Path)
	}
	mux.HandleFunc("POST /v1/audio/transcriptions", heard)
	mux.HandleFunc("POST /v1/audio/translations", heard)
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: asr, url: %s, type: vllm, check_interval: 1h, aliases: {whisper-1: whisper}}
`, up.URL), "whisper")
	audio := bytes.Repeat([]byte{0, 1, 2, 3, 'R', 'I', 'F', 'F', '\r', '\n', '-', '-'}, 20_000) // 240 KB, boundary-like bytes inside
	ctx := context.Background()
	for _, base := range []string{"/v1/", "/olla/vllm/v1/"} {
		c := openai.NewClient(option.WithBaseURL("http://"+addr+base), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		tr, err := c.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: "whisper",
			File: openai.File(bytes.NewReader(audio), "speech.wav", "audio/wav")})
		require.NoError(t, err, base)
		assert.Equal(t, fmt.Sprintf("whisper heard 240000 bytes of speech.wav (sum %d) at /v1/audio/transcriptions", sum(audio)), tr.Text)
		tl, err := c.Audio.Translations.New(ctx, openai.AudioTranslationNewParams{Model: "whisper",
			File: openai.File(bytes.NewReader(audio), "speech.wav", "audio/wav")})
		require.NoError(t, err, base)
		assert.Contains(t, tl.Text, "at /v1/audio/translations")
	}
	require.EqualValues(t, 4, calls.Load())
	// An alias: the form's model field names the upstream's model, every other byte as sent.
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	tr, err := c.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: "whisper-1",
		File: openai.File(bytes.NewReader(audio), "speech.wav", "audio/wav")})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("whisper heard 240000 bytes of speech.wav (sum %d) at /v1/audio/transcriptions", sum(audio)), tr.Text)

	post := func(body []byte, contentType string) (int, string) {
		res, err := http.Post("http://"+addr+"/v1/audio/transcriptions", contentType, bytes.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	form := func(fields ...string) ([]byte, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("file", "a.wav")
		fw.Write(audio[:100])
		for i := 0; i+1 < len(fields); i += 2 {
			mw.WriteField(fields[i], fields[i+1])
		}
		mw.Close()
		return buf.Bytes(), mw.FormDataContentType()
	}
	body, ct := form("language", "en")
	status, msg := post(body, ct)
	assert.Equal(t, 400, status, msg)
	assert.Contains(t, msg, "model")
	body, ct = form("model", "nobody-serves-this")
	status, msg = post(body, ct)
	assert.Equal(t, 404, status, msg)
	status, msg = post([]byte("--x\r\nnot a form"), "multipart/form-data; boundary=x")
	assert.Equal(t, 400, status, msg)
	assert.Contains(t, msg, "invalid_form")
	body, ct = form("model", "whisper")
	status, msg = post(body, strings.Replace(ct, "boundary=", "charset=utf-8; x=", 1))
	assert.Equal(t, 400, status, msg)
	require.EqualValues(t, 5, calls.Load(), "no refused form reached the upstream")

	// curl -F writes the fields in the order given: the model before a file larger than the
	// form's head (1 MiB), so the form is streamed through rather than received whole first.
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed: the streamed form's check with curl is skipped")
	}
	big := bytes.Repeat(audio, 12) // 2.9 MB
	file := filepath.Join(t.TempDir(), "long.wav")
	require.NoError(t, os.WriteFile(file, big, 0o600))
	out, err := exec.Command(curl, "-sS", "-F", "model=whisper-1", "-F", "file=@"+file,
		"http://"+addr+"/v1/audio/transcriptions").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.JSONEq(t, fmt.Sprintf(`{"text":"whisper heard %d bytes of long.wav (sum %d) at /v1/audio/transcriptions"}`, len(big), sum(big)), string(out))
	// A second model field after the file: refused, before the upstream gets a whole form.
	out, err = exec.Command(curl, "-sS", "-w", " %{http_code}", "-F", "model=whisper-1", "-F", "file=@"+file,
		"-F", "model=whisper", "http://"+addr+"/v1/audio/transcriptions").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "duplicate_model")
	assert.True(t, strings.HasSuffix(string(out), " 400"), string(out))
	// Whether the upstream's handler started on the refused form before the gateway cut it
	// depends on timing (the handler runs once the head is in; CI saw both): either way the
	// upstream could not read it.
	require.Contains(t, []int64{6, 7}, calls.Load())
	require.EqualValues(t, 6, parsed.Load(), "the upstream could not read the refused form: it was cut short")
}

func sum(b []byte) int {
	n := 0
	for _, c := range b {
		n += int(c)
	}
	return n
}
