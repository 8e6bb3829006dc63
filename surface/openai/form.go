package openai

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// AudioPaths are vLLM's speech-to-text routes (Whisper and other ASR models). Their bodies are
// multipart forms (the audio file, model, language, prompt, response_format, stream...),
// forwarded as they came, routed on the form's model field through the model's stages,
// routing, failover and metrics.
//
// A form whose model field comes within its first ProxyOptions.FormMemoryBytes (curl -F in that
// order, openai-python, which writes fields before files) goes upstream as it arrives: only that
// head is held, and the rest passes through a formGuard, which refuses a second model field
// before any of it goes on. Such a form can go to a second endpoint only if the first read none
// of it (it refused the connection); once one has read it, its answer is the client's.
//
// A form whose model comes later (openai-go and openai-node write the file first) is received
// whole before it goes upstream, as nginx's request buffering does: its first FormMemoryBytes in
// memory, the rest in a temporary file (httpapi.Spool), read in place (its file part is skipped,
// never copied) and resent whole on a failover.
var AudioPaths = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// maxFormField bounds a form field the gateway reads (model, stream): more is not a model name.
const maxFormField = 1 << 10

// readForm reads a multipart form's head, and streams the rest or spools it (AudioPaths).
func (p *Proxy) readForm(r *http.Request, unreadable func(error) *pipeline.Error) (*pipeline.Request, func(), *pipeline.Error) {
	o := httpapi.SpoolOptions{Limit: p.opts.MaxBodyBytes, Memory: p.opts.FormMemoryBytes, Dir: p.opts.SpoolDir, Budget: p.spoolBudget}
	spoolErr := func(err error) *pipeline.Error {
		switch {
		case errors.Is(err, httpapi.ErrSpoolFull):
			return pipeline.Unavailable("server_busy", time.Second,
				"The gateway is holding as many uploaded forms as it may; retry shortly.")
		case errors.Is(err, httpapi.ErrSpool):
			return pipeline.ServerError(http.StatusInternalServerError, "spool_failed",
				"The gateway could not hold the form: "+err.Error())
		}
		return unreadable(err)
	}
	boundary, perr := formBoundary(r.Header.Get("Content-Type"))
	if perr != nil {
		return nil, nil, perr
	}
	form, whole, err := httpapi.SpoolHead(r, o)
	if err != nil {
		return nil, nil, spoolErr(err)
	}
	done := func() { form.Close() }
	if !whole {
		head := form.Bytes()
		f, err := readFields(io.MultiReader(bytes.NewReader(head), failReader{errHeadEnd}), boundary)
		if err != nil && !errors.Is(err, errHeadEnd) {
			form.Close()
			return nil, nil, err.(*pipeline.Error)
		}
		if f.models == 1 && f.model != "" { // the model, once, in the head: the rest goes on as it comes
			g := newFormGuard(head, r.Body, boundary)
			if g.err != nil {
				form.Close()
				return nil, nil, pipeline.FormError(g.err)
			}
			// The guard must have seen the head's model field too, or a second could pass it.
			if g.models == 1 {
				start, end := modelSpan(bytes.NewReader(head), int64(len(head)), boundary, f.model)
				return pipeline.NewStreamedFormRequest(r.URL.Path, head, g, r.ContentLength, f.model, start, end,
					strings.EqualFold(f.stream, "true")), done, nil
			}
		}
		if err := httpapi.SpoolRest(form, r, o); err != nil {
			return nil, nil, spoolErr(err)
		}
	}
	req, perr := formRequest(r.URL.Path, boundary, form)
	if perr != nil {
		form.Close()
		return nil, nil, perr
	}
	return req, done, nil
}

// formBoundary is a multipart form's boundary, from its Content-Type.
func formBoundary(contentType string) (string, *pipeline.Error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", pipeline.InvalidRequest("", "invalid_content_type", "The body must be multipart/form-data with a boundary.")
	}
	return params["boundary"], nil
}

// failReader reads nothing but its error.
type failReader struct{ err error }

func (f failReader) Read([]byte) (int, error) { return 0, f.err }

// errHeadEnd is where a form's head, read for its fields before the rest has come, ends.
var errHeadEnd = errors.New("the end of the form's head")

// formFields are the fields a form is routed on.
type formFields struct {
	model, stream string
	models        int // how many model fields (the last one's value is model)
}

// readFields reads a form's routing fields. A reader that ends with errHeadEnd (a head) gives
// the fields of the parts wholly in it, with errHeadEnd.
func readFields(rd io.Reader, boundary string) (formFields, error) {
	var f formFields
	mr := multipart.NewReader(rd, boundary)
	bad := func(err error) error {
		if errors.Is(err, errHeadEnd) {
			return errHeadEnd
		}
		return pipeline.InvalidRequest("", "invalid_form", "The multipart form could not be read: "+err.Error())
	}
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		if err != nil {
			return f, bad(err)
		}
		switch p.FormName() {
		case "model", "stream":
			v, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
			if err != nil {
				return f, bad(err)
			}
			if len(v) > maxFormField {
				return f, pipeline.InvalidRequest(p.FormName(), "invalid_value", "The form field "+p.FormName()+" is not a short text value.")
			}
			if p.FormName() == "model" {
				f.model = string(v)
				f.models++
			} else {
				f.stream = string(v)
			}
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return f, bad(err)
			}
		}
	}
}

// formRequest reads a whole multipart form's routing fields and returns the request for path.
func formRequest(path, boundary string, form *httpapi.Spool) (*pipeline.Request, *pipeline.Error) {
	f, err := readFields(form.Section(0, form.Size()), boundary)
	if err != nil {
		return nil, err.(*pipeline.Error)
	}
	if f.models == 0 || f.model == "" {
		return nil, pipeline.MissingModel()
	}
	start, end := -1, -1
	if f.models == 1 { // with two, which one vLLM reads is its business: the form goes as it is
		start, end = modelSpan(form, form.Size(), boundary, f.model)
	}
	return pipeline.NewFormRequest(path, form, f.model, start, end, strings.EqualFold(f.stream, "true")), nil
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
