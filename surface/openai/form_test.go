package openai

import (
	"bytes"
	"mime/multipart"
	"testing"
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
		req, err := formRequest("/v1/audio/transcriptions", "multipart/form-data; boundary=b0undary", body)
		if err != nil {
			return
		}
		model := req.Model()
		renamed := req.BodyWithModel("other-name")
		back := req.BodyWithModel(model)
		if !bytes.Equal(back, body) {
			t.Fatalf("naming the model as read changed the body")
		}
		if r := req.Routing(); r.ModelStart >= 0 {
			if string(body[r.ModelStart:r.ModelEnd]) != model {
				t.Fatalf("the span holds %q, not the model %q", body[r.ModelStart:r.ModelEnd], model)
			}
			if len(renamed) != len(body)-len(model)+len("other-name") {
				t.Fatalf("renaming changed more than the model")
			}
		}
	})
}
