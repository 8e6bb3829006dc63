package openai

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
)

// AudioPaths are vLLM's speech-to-text routes (Whisper and other ASR models). Their bodies are
// multipart forms (the audio file, model, language, prompt, response_format, stream...),
// forwarded as they came, routed on the form's model field through the model's stages,
// routing, failover and metrics.
//
// The body is held whole, up to ProxyOptions.MaxBodyBytes, before it goes upstream: the model
// may follow the file in the form (openai-node writes the fields in the order the caller gave
// them, file first), and a failover resends it. Nothing else is copied: the form is read in
// place, its file part skipped.
var AudioPaths = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// maxFormField bounds a form field the gateway reads (model, stream): more is not a model name.
const maxFormField = 1 << 10

// formRequest reads a multipart form's routing fields and returns the request for path.
func formRequest(path, contentType string, body []byte) (*pipeline.Request, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, pipeline.InvalidRequest("", "invalid_content_type", "The body must be multipart/form-data with a boundary.")
	}
	boundary := params["boundary"]
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var model, stream string
	hasModel := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, pipeline.InvalidRequest("", "invalid_form", "The multipart form could not be read: "+err.Error())
		}
		switch p.FormName() {
		case "model", "stream":
			v, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
			if err != nil || len(v) > maxFormField {
				return nil, pipeline.InvalidRequest(p.FormName(), "invalid_value", "The form field "+p.FormName()+" is not a short text value.")
			}
			if p.FormName() == "model" {
				model, hasModel = string(v), true
			} else {
				stream = string(v)
			}
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return nil, pipeline.InvalidRequest("", "invalid_form", "The multipart form could not be read: "+err.Error())
			}
		}
	}
	if !hasModel || model == "" {
		return nil, pipeline.MissingModel()
	}
	start, end := modelSpan(body, boundary, model)
	return pipeline.NewFormRequest(path, body, model, start, end, strings.EqualFold(stream, "true")), nil
}

// modelSpan finds where the form's model field's value is in body, for a route that names the
// model otherwise upstream: the one part named model whose content is the value read; -1 when
// it is not found exactly so (the body then goes as it is).
func modelSpan(body []byte, boundary, model string) (start, end int) {
	delim := []byte("--" + boundary)
	found := -1
	for i := 0; ; {
		j := bytes.Index(body[i:], delim)
		if j < 0 {
			break
		}
		hs := i + j + len(delim)
		he := bytes.Index(body[hs:], []byte("\r\n\r\n"))
		if he < 0 {
			break
		}
		head := strings.ToLower(string(body[hs : hs+he]))
		cs := hs + he + 4
		if strings.Contains(head, `name="model"`) {
			if found >= 0 {
				return -1, -1 // two: which one vLLM reads is its business
			}
			if bytes.HasPrefix(body[cs:], []byte(model+"\r\n"+string(delim))) {
				found = cs
			}
		}
		i = cs
	}
	if found < 0 {
		return -1, -1
	}
	return found, found + len(model)
}

// isForm reports whether r carries a multipart form.
func isForm(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/form-data")
}
