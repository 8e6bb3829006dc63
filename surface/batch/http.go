package batch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/files"
	"google.golang.org/grpc"
)

// Mount serves the Files and Batches API on mux (the grpc registrar is unused: the API is
// HTTP only, as OpenAI's).
func (s *Service) Mount(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
	mux.HandleFunc("POST /v1/files", s.uploadFile)
	mux.HandleFunc("GET /v1/files", s.listFiles)
	mux.HandleFunc("GET /v1/files/{id}", s.getFile)
	mux.HandleFunc("GET /v1/files/{id}/content", s.fileContent)
	mux.HandleFunc("DELETE /v1/files/{id}", s.deleteFile)
	mux.HandleFunc("POST /v1/batches", s.createBatch)
	mux.HandleFunc("GET /v1/batches", s.listBatches)
	mux.HandleFunc("GET /v1/batches/{id}", s.getBatch)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.cancelBatch)
}

func invalid(param, format string, args ...any) *pipeline.Error {
	return pipeline.InvalidRequest(param, "", fmt.Sprintf(format, args...))
}

func notFound(what, id string) *pipeline.Error {
	return pipeline.NotFound("id", "", fmt.Sprintf("No such %s object: %s", what, id))
}

func (s *Service) internal(w http.ResponseWriter, what string, err error) {
	s.log.Error(what, "err", err)
	pipeline.ServerError(http.StatusInternalServerError, "", "The server had an error while processing your request.").Write(w)
}

// stateRetryAfter is the Retry-After of a request refused because the state store could not be
// reached: an outage of Redis rarely ends sooner, and a client retrying sooner only adds load.
const stateRetryAfter = 2 * time.Second

// stateContext bounds the state store's part of a request (Options.StoreTimeout).
func (s *Service) stateContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.o.StoreTimeout)
}

// stateFailed answers a request whose call to the state store failed: 503 with Retry-After when
// the store could not be reached or did not answer within StoreTimeout (the client may simply
// try again), nothing but a Debug line when the client went away (nobody reads the answer), and
// 500 for anything else, which is a bug of ours.
func (s *Service) stateFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case r.Context().Err() != nil:
		s.log.Debug(what+": the client went away", "err", err)
	case errors.Is(err, batchstate.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		// Debug only: with Redis down every request says the same, and the sweep already warns
		// every few seconds that the store fails.
		s.log.Debug(what+": the batch state store cannot be reached", "err", err)
		pipeline.Unavailable("state_unavailable", stateRetryAfter,
			"The batch state store cannot be reached right now; retry in a few seconds.").Write(w)
	default:
		s.internal(w, what, err)
	}
}

// fileObject is OpenAI's file object.
type fileObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
}

func fileView(f files.File) fileObject {
	return fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt, Filename: f.Filename,
		Purpose: f.Purpose, Status: "processed"}
}

// visible reports whether the caller may see what owner created: anyone with API keys off, the
// owner itself, and admin keys.
func visible(r *http.Request, owner string) bool {
	p := guard.PrincipalFrom(r.Context())
	return p == nil || p.Admin || p.Name == owner
}

// ownerModels is the allow-list of the key making the request.
func ownerModels(r *http.Request) []string {
	if p := guard.PrincipalFrom(r.Context()); p != nil {
		return p.Models
	}
	return nil
}

// ownerOf is the name of the key making the request, "" with API keys off.
func ownerOf(r *http.Request) string {
	if p := guard.PrincipalFrom(r.Context()); p != nil {
		return p.Name
	}
	return ""
}

// uploadFile stores a multipart upload's "file" part (purpose "batch"), streaming it to the
// store with the size limit enforced as the bytes arrive.
func (s *Service) uploadFile(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		invalid("", "Expected a multipart/form-data body with the fields 'file' and 'purpose'.").Write(w)
		return
	}
	boundary := params["boundary"]
	if boundary == "" {
		invalid("", "Malformed multipart body: the Content-Type names no boundary.").Write(w)
		return
	}
	body := newCloseWatch(http.MaxBytesReader(w, r.Body, s.o.MaxFileBytes+1<<20), boundary)
	mr := multipart.NewReader(body, boundary)
	var (
		purpose string
		stored  *files.File
	)
	drop := func() {
		if stored != nil {
			// Even once the client went away: nothing it did not finish stays stored.
			_ = s.o.Files.Delete(context.WithoutCancel(ctx), stored.ID)
		}
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) && !body.seen {
			// mime/multipart ends with io.EOF, as it does at the close delimiter, when the body
			// stops right after a part's delimiter: the body was cut short.
			err = io.ErrUnexpectedEOF
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			drop()
			invalid("", "Malformed multipart body: %v.", err).Write(w)
			return
		}
		switch part.FormName() {
		case "purpose":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			purpose = string(b)
		case "file":
			if stored != nil {
				drop()
				invalid("file", "Only one file may be uploaded at a time.").Write(w)
				return
			}
			name := part.FileName()
			if name == "" {
				name = "upload.jsonl"
			}
			if len(name) > 255 {
				invalid("file", "The file name is longer than 255 bytes.").Write(w)
				return
			}
			content := &readErr{r: part}
			f, err := s.o.Files.Put(ctx, files.File{ID: files.NewID("file-"), CreatedAt: s.now().Unix(),
				Filename: name, Purpose: "batch", Owner: ownerOf(r)}, content, s.o.MaxFileBytes)
			if errors.Is(err, files.ErrTooLarge) {
				invalid("file", "The file is larger than %d bytes.", s.o.MaxFileBytes).Write(w)
				return
			}
			if err != nil {
				// Put stored nothing. What failed is the body (cut short, malformed, too large,
				// the client gone) unless reading it went well: only then is it the store.
				var mbe *http.MaxBytesError
				switch {
				case errors.As(content.err, &mbe):
					invalid("file", "The request body is too large.").Write(w)
				case content.err != nil || ctx.Err() != nil:
					s.log.Debug("an upload ended before its file did", "err", err)
					invalid("file", "Malformed multipart body: the file part ended early (%v).", cmp.Or(content.err, ctx.Err())).Write(w)
				default:
					s.internal(w, "storing an uploaded file", err)
				}
				return
			}
			stored = &f
		}
		part.Close()
	}
	switch {
	case stored == nil:
		invalid("file", "Missing required parameter: 'file'.").Write(w)
	case purpose != "batch":
		drop()
		invalid("purpose", "Invalid purpose %q: this server stores files for batches only ('batch').", purpose).Write(w)
	default:
		httpapi.WriteJSON(w, http.StatusOK, fileView(*stored))
	}
}

// closeWatch passes a multipart body on, watching for its close delimiter ("--boundary--" at
// the start of a line): mime/multipart ends with io.EOF both there and where a body stops right
// after a part's delimiter, and only this tells a whole body from one cut short.
type closeWatch struct {
	r    io.Reader
	want []byte // "\n--boundary--"
	// tail holds the last len(want)-1 bytes read (at first the start of the body counts as a
	// line's start), so a delimiter split between two reads is found too; seam is scratch.
	tail, seam []byte
	seen       bool
}

func newCloseWatch(r io.Reader, boundary string) *closeWatch {
	want := []byte("\n--" + boundary + "--")
	return &closeWatch{r: r, want: want, tail: append(make([]byte, 0, len(want)), '\n'),
		seam: make([]byte, 0, 2*len(want))}
}

func (c *closeWatch) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.seen {
		k := len(c.want) - 1
		c.seam = append(append(c.seam[:0], c.tail...), p[:min(n, k)]...)
		c.seen = bytes.Contains(c.seam, c.want) || bytes.Contains(p[:n], c.want)
		if n >= k {
			c.tail = append(c.tail[:0], p[n-k:n]...)
		} else {
			c.tail = append(c.tail[:0], c.seam[max(0, len(c.seam)-k):]...)
		}
	}
	return n, err
}

// readErr remembers the error a read of r returned, other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && e.err == nil {
		e.err = err
	}
	return n, err
}

// listFiles lists the caller's files, newest first unless order=asc, a page of limit (1 to
// 10,000, default 10,000) after the file named by after.
func (s *Service) listFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 10_000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10_000 {
			invalid("limit", "limit must be an integer from 1 to 10000.").Write(w)
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		invalid("order", "order must be asc or desc.").Write(w)
		return
	}
	fs, more, err := s.o.Files.List(r.Context(), files.ListOptions{Purpose: q.Get("purpose"), After: q.Get("after"),
		Ascending: order == "asc", Limit: limit, Keep: func(f files.File) bool { return visible(r, f.Owner) }})
	if err != nil {
		s.internal(w, "listing files", err)
		return
	}
	data := make([]fileObject, 0, len(fs))
	for _, f := range fs {
		data = append(data, fileView(f))
	}
	var first, last *string
	if len(data) > 0 {
		first, last = &data[0].ID, &data[len(data)-1].ID
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more})
}

// file looks up the file the path names, answering 404 when there is none.
func (s *Service) file(w http.ResponseWriter, r *http.Request) (files.File, bool) {
	id := r.PathValue("id")
	f, err := s.o.Files.Get(r.Context(), id)
	switch {
	case errors.Is(err, files.ErrNotFound) || (err == nil && !visible(r, f.Owner)):
		notFound("File", id).Write(w)
		return f, false
	case err != nil:
		s.internal(w, "reading a file", err)
		return f, false
	}
	return f, true
}

func (s *Service) getFile(w http.ResponseWriter, r *http.Request) {
	if f, ok := s.file(w, r); ok {
		httpapi.WriteJSON(w, http.StatusOK, fileView(f))
	}
}

func (s *Service) fileContent(w http.ResponseWriter, r *http.Request) {
	f, ok := s.file(w, r)
	if !ok {
		return
	}
	rc, err := s.o.Files.Open(r.Context(), f.ID)
	if errors.Is(err, files.ErrNotFound) {
		notFound("File", f.ID).Write(w)
		return
	}
	if err != nil {
		s.internal(w, "opening a file", err)
		return
	}
	defer rc.Close()
	// No Content-Length from f: the file may have been replaced between Get and Open.
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, rc)
}

func (s *Service) deleteFile(w http.ResponseWriter, r *http.Request) {
	f, ok := s.file(w, r)
	if !ok {
		return
	}
	id := f.ID
	// A running batch reads its input again (to take over a dispatch, to give up the lines of a
	// cancelled or expired batch): its input stays until it finished. Unsure (the state store
	// cannot be reached), the file stays.
	ctx, cancel := s.stateContext(r)
	defer cancel()
	active, err := s.o.State.Active(ctx)
	if err != nil {
		s.stateFailed(w, r, "listing active batches", err)
		return
	}
	for _, bid := range active {
		b, err := s.o.State.Get(ctx, bid)
		if errors.Is(err, batchstate.ErrNotFound) {
			continue // finished and gone since Active
		}
		if err != nil {
			s.stateFailed(w, r, "reading an active batch", err)
			return
		}
		if b.InputFileID == id && !b.Status.Terminal() {
			invalid("id", "The file %s is the input of batch %s, which has not finished; cancel it or wait.", id, bid).Write(w)
			return
		}
	}
	err = s.o.Files.Delete(r.Context(), id)
	switch {
	case errors.Is(err, files.ErrNotFound):
		notFound("File", id).Write(w)
	case err != nil:
		s.internal(w, "deleting a file", err)
	default:
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
	}
}

// Completion windows: OpenAI's "24h", or (an infergate extension) any duration from 1 s to 7 days.
const maxWindow = 7 * 24 * time.Hour

func parseWindow(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	return d, err == nil && d >= time.Second && d <= maxWindow
}

type createBatchRequest struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

func (s *Service) createBatch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req createBatchRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&req); err != nil {
		invalid("", "The body is not a valid JSON object: %v.", jsonProblem(err)).Write(w)
		return
	}
	window, windowOK := parseWindow(req.CompletionWindow)
	switch {
	case req.InputFileID == "":
		invalid("input_file_id", "Missing required parameter: 'input_file_id'.").Write(w)
		return
	case !endpoints[req.Endpoint]:
		invalid("endpoint", "Invalid endpoint %q: one of /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses.", req.Endpoint).Write(w)
		return
	case !windowOK:
		invalid("completion_window", "Invalid completion_window %q: '24h' (or a duration from 1s to 168h).", req.CompletionWindow).Write(w)
		return
	case len(req.Metadata) > 16:
		invalid("metadata", "metadata holds at most 16 pairs.").Write(w)
		return
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			invalid("metadata", "metadata keys are at most 64 characters and values at most 512.").Write(w)
			return
		}
	}
	f, err := s.o.Files.Get(ctx, req.InputFileID)
	if errors.Is(err, files.ErrNotFound) || (err == nil && !visible(r, f.Owner)) {
		pipeline.NotFound("input_file_id", "", fmt.Sprintf("No such File object: %s", req.InputFileID)).Write(w)
		return
	}
	if err != nil {
		s.internal(w, "reading a batch's input file", err)
		return
	}
	if f.Purpose != "batch" {
		invalid("input_file_id", "The file %s has purpose %q; a batch's input needs purpose 'batch'.", f.ID, f.Purpose).Write(w)
		return
	}
	now := s.now()
	// Rounded up to the second, so a window is never cut short.
	expires := now.Add(window + time.Second - 1).Unix()
	b := &batchstate.Batch{ID: files.NewID("batch_"), Endpoint: req.Endpoint, InputFileID: req.InputFileID,
		CompletionWindow: req.CompletionWindow, Status: batchstate.Validating, CreatedAt: now.Unix(),
		ExpiresAt: expires, Metadata: req.Metadata, Owner: ownerOf(r), OwnerModels: ownerModels(r),
		Claim: s.o.ID, ClaimUntil: now.Add(s.o.ClaimTTL).UnixMilli()}
	sctx, cancel := s.stateContext(r)
	defer cancel()
	if err := s.o.State.Create(sctx, b); err != nil {
		s.stateFailed(w, r, "creating a batch", err)
		return
	}
	s.m.batches.WithLabelValues(string(batchstate.Validating)).Inc()
	s.background(func(ctx context.Context) { s.holdClaim(ctx, b.ID, func(ctx context.Context) { s.prepare(ctx, b.ID) }) })
	httpapi.WriteJSON(w, http.StatusOK, batchView(b, now))
}

// batch looks up the batch the path names, answering 404 when there is none.
func (s *Service) batch(ctx context.Context, w http.ResponseWriter, r *http.Request) (*batchstate.Batch, bool) {
	id := r.PathValue("id")
	b, err := s.o.State.Get(ctx, id)
	switch {
	case errors.Is(err, batchstate.ErrNotFound) || (err == nil && !visible(r, b.Owner)):
		notFound("Batch", id).Write(w)
		return nil, false
	case err != nil:
		s.stateFailed(w, r, "reading a batch", err)
		return nil, false
	}
	return b, true
}

func (s *Service) getBatch(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.stateContext(r)
	defer cancel()
	if b, ok := s.batch(ctx, w, r); ok {
		httpapi.WriteJSON(w, http.StatusOK, batchView(b, s.now()))
	}
}

func (s *Service) listBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			invalid("limit", "limit must be an integer from 1 to 100.").Write(w)
			return
		}
		limit = n
	}
	ctx, cancel := s.stateContext(r)
	defer cancel()
	bs, more, err := s.listVisible(ctx, r, q.Get("after"), limit)
	if err != nil {
		s.stateFailed(w, r, "listing batches", err)
		return
	}
	now := s.now()
	data := make([]batchObject, len(bs))
	for i, b := range bs {
		data[i] = batchView(b, now)
	}
	var first, last *string
	if len(bs) > 0 {
		first, last = &bs[0].ID, &bs[len(bs)-1].ID
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more})
}

// listVisible pages through the batches newest first, keeping those the caller may see, until
// it has limit of them.
func (s *Service) listVisible(ctx context.Context, r *http.Request, after string, limit int) ([]*batchstate.Batch, bool, error) {
	var out []*batchstate.Batch
	for {
		bs, more, err := s.o.State.List(ctx, after, limit)
		if err != nil {
			return nil, false, err
		}
		for _, b := range bs {
			if !visible(r, b.Owner) {
				continue
			}
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, b)
		}
		if !more || len(bs) == 0 {
			return out, false, nil
		}
		after = bs[len(bs)-1].ID
	}
}

// cancelBatch stops a batch: one still validating is cancelled at once; one in progress is
// cancelling until the lines in flight stopped, then cancelled with its partial output.
func (s *Service) cancelBatch(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.stateContext(r)
	defer cancel()
	cur, ok := s.batch(ctx, w, r)
	if !ok {
		return
	}
	id := cur.ID
	now := s.now().Unix()
	var refused batchstate.Status
	moved := false // straight to cancelled
	b, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
		refused = ""
		switch b.Status {
		case batchstate.Validating:
			b.Status, b.CancellingAt, b.CancelledAt, b.Claim, b.ClaimUntil = batchstate.Cancelled, now, now, "", 0
			moved = true
		case batchstate.InProgress:
			b.Status, b.CancellingAt = batchstate.Cancelling, now
		case batchstate.Cancelling, batchstate.Cancelled:
			return batchstate.ErrUnchanged
		default:
			refused = b.Status
			return batchstate.ErrUnchanged
		}
		return nil
	})
	switch {
	case errors.Is(err, batchstate.ErrNotFound):
		notFound("Batch", id).Write(w)
	case err != nil:
		s.stateFailed(w, r, "cancelling a batch", err)
	case refused != "":
		invalid("", "Cannot cancel a batch with status '%s'.", refused).Write(w)
	default:
		if moved {
			s.m.batches.WithLabelValues(string(batchstate.Cancelled)).Inc()
		}
		s.log.Info("batch cancel requested", "batch", id, "status", b.Status)
		httpapi.WriteJSON(w, http.StatusOK, batchView(b, s.now()))
	}
}

// batchObject is OpenAI's batch object, plus infergate's progress.
type batchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            *string           `json:"model"`
	Errors           *batchErrors      `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    requestCounts     `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
	Progress         progress          `json:"progress"`
}

type batchErrors struct {
	Object string                  `json:"object"`
	Data   []batchstate.ErrorEntry `json:"data"`
}

type requestCounts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

// progress is an infergate extension of the batch object: how far the batch got and how fast.
type progress struct {
	Done           int64   `json:"done"`
	Total          int64   `json:"total"`
	Percent        float64 `json:"percent"`
	LinesPerSecond float64 `json:"lines_per_second"`
}

func batchView(b *batchstate.Batch, now time.Time) batchObject {
	opt := func(v int64) *int64 {
		if v == 0 {
			return nil
		}
		return &v
	}
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	o := batchObject{ID: b.ID, Object: "batch", Endpoint: b.Endpoint, Model: str(b.Model), InputFileID: b.InputFileID,
		CompletionWindow: b.CompletionWindow, Status: string(b.Status), OutputFileID: str(b.OutputFileID),
		ErrorFileID: str(b.ErrorFileID), CreatedAt: b.CreatedAt, InProgressAt: opt(b.InProgressAt),
		ExpiresAt: opt(b.ExpiresAt), FinalizingAt: opt(b.FinalizingAt), CompletedAt: opt(b.CompletedAt),
		FailedAt: opt(b.FailedAt), ExpiredAt: opt(b.ExpiredAt), CancellingAt: opt(b.CancellingAt),
		CancelledAt: opt(b.CancelledAt), Metadata: b.Metadata,
		RequestCounts: requestCounts{Total: b.Counts.Total, Completed: b.Counts.Completed, Failed: b.Counts.Failed}}
	if len(b.Errors) > 0 {
		o.Errors = &batchErrors{Object: "list", Data: b.Errors}
	}
	c := b.Counts
	o.Progress = progress{Done: c.Completed + c.Failed + c.Skipped, Total: c.Total}
	if c.Total > 0 {
		o.Progress.Percent = float64(o.Progress.Done) * 100 / float64(c.Total)
	}
	if b.InProgressAt != 0 {
		end := now.Unix()
		for _, t := range []int64{b.FinalizingAt, b.CancelledAt, b.ExpiredAt} {
			if t != 0 {
				end = t
				break
			}
		}
		if secs := end - b.InProgressAt; secs > 0 {
			o.Progress.LinesPerSecond = float64(o.Progress.Done) / float64(secs)
		} else {
			o.Progress.LinesPerSecond = float64(o.Progress.Done)
		}
	}
	return o
}
