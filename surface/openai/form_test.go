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
		ct := "multipart/form-data; boundary=b0undary"
		req, perr := formRequest("/v1/audio/transcriptions", ct, httpapi.NewSpool(body))
		// The same form spooled half to disk reads the same.
		hr := httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
		hr.ContentLength = -1
		spool, err := httpapi.SpoolBody(hr, httpapi.SpoolOptions{Limit: 1 << 20, Memory: len(body) / 2, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer spool.Close()
		onDisk, derr := formRequest("/v1/audio/transcriptions", ct, spool)
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
			rd, n := r.FormBody(name)
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
	})
}
