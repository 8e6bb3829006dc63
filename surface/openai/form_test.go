package openai

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// FuzzFormRequest: whatever a multipart body holds, reading its routing fields never panics,
// and a model value found in place is the model read, so that renaming it touches nothing else.
func FuzzFormRequest(f *testing.F) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.SetBoundary("b0undary")
	fw, _ := mw.CreateFormFile("file", "a.wav")
	_, _ = fw.Write([]byte("RIFF\r\n--b0undary\r\nnot a part"))
	_ = mw.WriteField("model", "whisper")
	_ = mw.WriteField("stream", "true")
	_ = mw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nn\r\n--b0undary--\r\n"))
	f.Add([]byte("--b0undary\r\nContent-Disposition: form-data; name=\"MODEL\"\r\n\r\nm\r\n--b0undary--"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, perr := formRequest("/v1/audio/transcriptions", "b0undary", httpapi.NewSpool(body))
		// The same form spooled half to disk reads the same.
		hr := httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
		hr.ContentLength = -1
		spool, err := httpapi.SpoolBody(hr, httpapi.SpoolOptions{Limit: 1 << 20, Memory: len(body) / 2, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer spool.Close()
		onDisk, derr := formRequest("/v1/audio/transcriptions", "b0undary", spool)
		if (perr == nil) != (derr == nil) {
			t.Fatalf("in memory: %v; half on disk: %v", perr, derr)
		}
		if perr != nil {
			return
		}
		if req.Routing() != onDisk.Routing() {
			t.Fatalf("in memory %+v, half on disk %+v", req.Routing(), onDisk.Routing())
		}
		model := req.Model()
		read := func(r *pipeline.Request, name string) []byte {
			rd, n, _ := r.FormBody(name)
			b, err := io.ReadAll(rd)
			if err != nil || int64(len(b)) != n {
				t.Fatalf("read %d of %d bytes: %v", len(b), n, err)
			}
			return b
		}
		renamed := read(req, "other-name")
		if !bytes.Equal(read(onDisk, "other-name"), renamed) {
			t.Fatalf("renamed differently on disk")
		}
		if back := read(req, model); !bytes.Equal(back, body) {
			t.Fatalf("naming the model as read changed the body")
		}
		if r := req.Routing(); r.ModelStart >= 0 {
			if string(body[r.ModelStart:r.ModelEnd]) != model {
				t.Fatalf("the span holds %q, not the model %q", body[r.ModelStart:r.ModelEnd], model)
			}
			if !bytes.Equal(renamed, slices.Concat(body[:r.ModelStart], []byte("other-name"), body[r.ModelEnd:])) {
				t.Fatalf("renaming changed more than the model")
			}
		} else if !bytes.Equal(renamed, body) {
			t.Fatalf("a form whose model's place is not known was changed")
		}
		// Read as the gateway reads a form of unknown length, with a head of a third of it: the
		// same form is streamed or spooled, and either way goes on renamed the same, or the
		// stream fails (a second model field); never a form mime/multipart reads two models in.
		p := &Proxy{opts: ProxyOptions{MaxBodyBytes: 1 << 20, FormMemoryBytes: max(len(body)/3, 1), SpoolDir: t.TempDir()}}
		hr = httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
		hr.Header.Set("Content-Type", "multipart/form-data; boundary=b0undary")
		hr.ContentLength = -1
		got, done, gerr := p.readForm(hr, func(err error) *pipeline.Error { return pipeline.InvalidRequest("", "", err.Error()) })
		if gerr != nil {
			return
		}
		defer done()
		rd, _, _ := got.FormBody("other-name")
		b, err := io.ReadAll(rd)
		if n, ok := models(body, "b0undary"); err == nil && ok && n > 1 && !got.FormResendable() {
			t.Fatalf("streamed a form with %d model fields", n)
		}
		if err == nil && got.Model() == model && !bytes.Equal(b, renamed) {
			t.Fatalf("read as it came, the form went on as %q, not %q", b, renamed)
		}
	})
}
