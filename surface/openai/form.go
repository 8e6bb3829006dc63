package openai

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// AudioPaths are vLLM's speech-to-text routes (Whisper and other ASR models). Their bodies are
// multipart forms (the audio file, model, language, prompt, response_format, stream...),
// forwarded as they came, routed on the form's model field through the model's stages,
// routing, failover and metrics.
//
// The form is received whole before it goes upstream, as nginx's request buffering does: the
// model may follow the file in the form (openai-node and openai-go write the file first), a
// failover resends it, and vLLM reads the whole form before it starts. Only its first
// ProxyOptions.FormMemoryBytes are held in memory; the rest waits in a temporary file
// (httpapi.Spool). The form is read in place: its file part is skipped, never copied.
var AudioPaths = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// maxFormField bounds a form field the gateway reads (model, stream): more is not a model name.
const maxFormField = 1 << 10

// formRequest reads a multipart form's routing fields and returns the request for path.
func formRequest(path, contentType string, form *httpapi.Spool) (*pipeline.Request, *pipeline.Error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, pipeline.InvalidRequest("", "invalid_content_type", "The body must be multipart/form-data with a boundary.")
	}
	boundary := params["boundary"]
	mr := multipart.NewReader(form.Section(0, form.Size()), boundary)
	var model, stream string
	models := 0
	for {
		p, err := mr.NextRawPart()
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
				model = string(v)
				models++
			} else {
				stream = string(v)
			}
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return nil, pipeline.InvalidRequest("", "invalid_form", "The multipart form could not be read: "+err.Error())
			}
		}
	}
	if models == 0 || model == "" {
		return nil, pipeline.MissingModel()
	}
	start, end := -1, -1
	if models == 1 { // with two, which one vLLM reads is its business: the form goes as it is
		start, end = modelSpan(form, form.Size(), boundary, model)
	}
	return pipeline.NewFormRequest(path, form, model, start, end, strings.EqualFold(stream, "true")), nil
}

// modelSpan finds where the value of the form's one model field is, for a route that names the
// model otherwise upstream; -1 when it is not found exactly so (the form then goes as it is). It
// reads the form in windows, never all at once: the value is the bytes between a part's header
// (which names the field model) and the next delimiter, so it looks for
// "\r\n\r\n" model "\r\n--" boundary, and checks each place found against the header before it.
func modelSpan(form io.ReaderAt, size int64, boundary, model string) (start, end int) {
	needle := []byte("\r\n\r\n" + model + "\r\n--" + boundary)
	delim := []byte("--" + boundary)
	const window = 64 << 10
	buf := make([]byte, window+len(needle))
	for off := int64(0); off < size; off += window {
		n, err := form.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return -1, -1
		}
		for i := 0; ; {
			j := bytes.Index(buf[i:n], needle)
			if j < 0 || i+j >= window { // one past the window is the next window's
				break
			}
			at := off + int64(i+j)
			if isModelHeader(form, at, delim) {
				s := at + 4
				return int(s), int(s) + len(model)
			}
			i += j + 1
		}
	}
	return -1, -1
}

// maxPartHeader bounds the header modelSpan reads back for: more is not a form field's header.
const maxPartHeader = 8 << 10

// isModelHeader reports whether the "\r\n\r\n" at at ends a part header naming the field model:
// the bytes from the last delimiter before it hold no other blank line (so it is the header's
// end, not bytes in a part's content) and name the field so.
func isModelHeader(form io.ReaderAt, at int64, delim []byte) bool {
	from := max(0, at-maxPartHeader)
	head := make([]byte, at-from)
	if _, err := form.ReadAt(head, from); err != nil {
		return false
	}
	k := bytes.LastIndex(head, delim)
	if k < 0 || k > 0 && head[k-1] != '\n' && from+int64(k) != 0 {
		return false // no delimiter, or one not at a line's start
	}
	h := head[k+len(delim):]
	if bytes.Contains(h, []byte("\r\n\r\n")) {
		return false
	}
	return bytes.Contains(bytes.ToLower(h), []byte(`name="model"`))
}

// isForm reports whether r carries a multipart form.
func isForm(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/form-data")
}
