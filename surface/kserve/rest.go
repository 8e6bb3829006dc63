package kserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/inflate"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The KServe v2 REST protocol (kserve.md §2) with Triton's extensions: binary tensor data,
// model configuration, statistics, repository control and generate. Every endpoint is a thin
// translation onto the same Service methods the gRPC surface uses, so models, errors and
// statistics are shared: an infer request becomes a *inference.ModelInferRequest (JSON data
// converted to raw bytes, binary data aliased from the body) and runs through ModelInfer's path.

// InferenceHeaderContentLength is Triton's binary tensor data header: the length of the JSON
// part of a request or response body, the rest being raw tensor bytes.
const InferenceHeaderContentLength = "Inference-Header-Content-Length"

// RESTHandler returns the REST protocol for the paths under /v2. Mount it on "/v2" and "/v2/";
// it answers unknown paths under them itself, with Triton's JSON 404.
func (s *Service) RESTHandler() http.Handler {
	mux := http.NewServeMux()
	get := func(pattern string, h restFunc) { mux.Handle(pattern, restMethod(http.MethodGet, h)) }
	post := func(pattern string, h restFunc) { mux.Handle(pattern, restMethod(http.MethodPost, h)) }

	get("/v2", s.restServerMetadata)
	get("/v2/health/live", func(w http.ResponseWriter, _ *http.Request) error { return restHealth(w, true, healthLive) })
	get("/v2/health/ready", func(w http.ResponseWriter, _ *http.Request) error { return restHealth(w, s.Ready(), healthReady) })
	get("/v2/models/stats", s.restStatistics)
	for _, model := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		get(model, s.restModelMetadata)
		get(model+"/ready", s.restModelReady)
		get(model+"/config", s.restModelConfig)
		get(model+"/stats", s.restStatistics)
		post(model+"/infer", withGatewayHeaders(s.restInfer))
		post(model+"/generate", withGatewayHeaders(s.restGenerate(false)))
		post(model+"/generate_stream", withGatewayHeaders(s.restGenerate(true)))
	}
	s.mountSharedMemory(get, post)
	post("/v2/repository/index", s.restRepositoryIndex)
	post("/v2/repository/models/{model}/load", s.restLoad)
	post("/v2/repository/models/{model}/unload", s.restUnload)
	mux.Handle("/v2/trace/setting", restGetPost(s.restTrace))
	mux.Handle("/v2/models/{model}/trace/setting", restGetPost(s.restTrace))
	mux.Handle("/v2/logging", restGetPost(s.restLogging))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeRESTError(w, http.StatusNotFound, "Not Found")
	})
	if s.tracer != nil {
		return s.tracer.HTTP(mux)
	}
	return mux
}

// restFunc is one endpoint; a returned error is written as the KServe error body.
type restFunc func(http.ResponseWriter, *http.Request) error

// withGatewayHeaders gives h's request context the request's X-Infergate-* headers (a chat
// session's X-Infergate-Session-Id, X-Infergate-Debug) as incoming metadata, the form they take
// on the gRPC surface, so a bridged LLM's call reads them alike on REST, gRPC and Connect
// (openai.IncomingHeader). Other headers stay out, as on gRPC; a request without such headers
// keeps its context.
func withGatewayHeaders(h restFunc) restFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var md metadata.MD
		for k, vv := range r.Header {
			if pipeline.GatewayHeader(k) {
				if md == nil {
					md = metadata.MD{}
				}
				md.Append(k, vv...) // lower-cases k, as grpc-go's incoming metadata is
			}
		}
		if md != nil {
			r = r.WithContext(metadata.NewIncomingContext(r.Context(), md))
		}
		return h(w, r)
	}
}

// restMethod serves h for one method (GET also answers HEAD) and answers others with Triton's
// JSON 405, where http.ServeMux's own would be plain text.
func restMethod(method string, h restFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", method)
			writeRESTError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		if err := h(w, r); err != nil {
			copyErrorMeta(w.Header(), err)
			writeRESTError(w, restStatus(err), restMessage(err))
		}
	})
}

// restGetPost serves h for GET (and HEAD), which reads settings, and POST, which changes them.
func restGetPost(h restFunc) http.Handler {
	get, post := restMethod(http.MethodGet, h), restMethod(http.MethodPost, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			post.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, POST")
			writeRESTError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		get.ServeHTTP(w, r)
	})
}

// copyErrorMeta passes on the headers a *connect.Error carries (the guard's Retry-After and
// X-RateLimit-* on a refusal).
func copyErrorMeta(h http.Header, err error) {
	var re *restError
	if errors.As(err, &re) {
		for k, vv := range re.header {
			h[k] = vv
		}
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for k, vv := range ce.Meta() {
			h[k] = vv
		}
	}
}

// writeRESTError writes the KServe error body {"error": "..."}.
func writeRESTError(w http.ResponseWriter, status int, msg string) {
	body := tensor.AppendJSONString([]byte(`{"error":`), msg)
	writeJSON(w, status, append(body, '}'))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) { httpapi.WriteRawJSON(w, status, body) }

// writeProto writes a message as Triton renders it (see appendProtoJSON).
func writeProto(w http.ResponseWriter, m proto.Message) error {
	writeJSON(w, http.StatusOK, appendProtoJSON(nil, m.ProtoReflect()))
	return nil
}

// The server health answers' bodies, as KServe's own server writes them.
var (
	healthLive  = []byte(`{"live":true}`)
	healthReady = []byte(`{"ready":true}`)
)

// restHealth answers a health or readiness probe: 200 when true, with body (JSON) if any, and
// Triton's 400 with no body when not. The server's probes answer KServe's JSON bodies where
// Triton's have none: Triton's clients read only the status, but KServe's InferenceRESTClient
// parses is_server_live's and is_server_ready's answers as JSON. A model's readiness keeps
// Triton's empty body, which KServe's client judges by its status.
func restHealth(w http.ResponseWriter, ok bool, body []byte) error {
	switch {
	case !ok:
		w.WriteHeader(http.StatusBadRequest)
	case body == nil:
		w.WriteHeader(http.StatusOK)
	default:
		writeJSON(w, http.StatusOK, body)
	}
	return nil
}

func (s *Service) restServerMetadata(w http.ResponseWriter, r *http.Request) error {
	md, err := s.ServerMetadata(r.Context(), &inference.ServerMetadataRequest{})
	if err != nil {
		return err
	}
	return writeProto(w, md)
}

func (s *Service) restModelMetadata(w http.ResponseWriter, r *http.Request) error {
	md, err := s.ModelMetadata(r.Context(), &inference.ModelMetadataRequest{Name: r.PathValue("model"), Version: r.PathValue("version")})
	if err != nil {
		return err
	}
	return writeProto(w, md)
}

func (s *Service) restModelReady(w http.ResponseWriter, r *http.Request) error {
	res, err := s.ModelReady(r.Context(), &inference.ModelReadyRequest{Name: r.PathValue("model"), Version: r.PathValue("version")})
	if err != nil {
		return err
	}
	return restHealth(w, res.GetReady(), nil)
}

// restModelConfig answers the model configuration itself, not wrapped in {"config": ...}, as
// Triton does.
func (s *Service) restModelConfig(w http.ResponseWriter, r *http.Request) error {
	res, err := s.ModelConfig(r.Context(), &inference.ModelConfigRequest{Name: r.PathValue("model"), Version: r.PathValue("version")})
	if err != nil {
		return err
	}
	return writeProto(w, res.GetConfig())
}

// restStatistics serves /v2/models/stats (every model) and /v2/models/{m}[/versions/{v}]/stats.
func (s *Service) restStatistics(w http.ResponseWriter, r *http.Request) error {
	res, err := s.ModelStatistics(r.Context(), &inference.ModelStatisticsRequest{Name: r.PathValue("model"), Version: r.PathValue("version")})
	if err != nil {
		return err
	}
	return writeProto(w, res)
}

// restRepositoryIndex answers the index as a bare JSON array, as Triton does. The body is
// optional: {"ready": true} lists only ready models.
func (s *Service) restRepositoryIndex(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, 0)
	if err != nil {
		return err
	}
	req := &inference.RepositoryIndexRequest{}
	if len(strings.TrimSpace(string(body))) > 0 {
		var j struct {
			Ready jsonValue `json:"ready"`
		}
		if err := json.Unmarshal(body, &j); err != nil {
			return jsonSyntaxError("the repository index request", err)
		}
		if j.Ready != nil {
			if req.Ready, err = boolParameter("ready", j.Ready); err != nil {
				return err
			}
		}
	}
	res, err := s.RepositoryIndex(r.Context(), req)
	if err != nil {
		return err
	}
	out := []byte{'['}
	for i, m := range res.GetModels() {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendProtoJSON(out, m.ProtoReflect())
	}
	writeJSON(w, http.StatusOK, append(out, ']'))
	return nil
}

// restRepositoryParameters reads the optional {"parameters": {...}} body of load and unload.
func (s *Service) restRepositoryParameters(w http.ResponseWriter, r *http.Request) (map[string]*inference.ModelRepositoryParameter, error) {
	body, err := s.readBody(w, r, 0)
	if err != nil || len(strings.TrimSpace(string(body))) == 0 {
		return nil, err
	}
	var j struct {
		Parameters map[string]jsonValue `json:"parameters"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, jsonSyntaxError("the repository request", err)
	}
	if len(j.Parameters) == 0 {
		return nil, nil
	}
	params := make(map[string]*inference.ModelRepositoryParameter, len(j.Parameters))
	for k, v := range j.Parameters {
		p, err := inferParameter(k, v)
		if err != nil {
			return nil, err
		}
		switch c := p.GetParameterChoice().(type) {
		case *inference.InferParameter_BoolParam:
			params[k] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_BoolParam{BoolParam: c.BoolParam}}
		case *inference.InferParameter_Int64Param:
			params[k] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_Int64Param{Int64Param: c.Int64Param}}
		case *inference.InferParameter_StringParam:
			params[k] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: c.StringParam}}
		default:
			return nil, invalid("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", k)
		}
	}
	return params, nil
}

func (s *Service) restLoad(w http.ResponseWriter, r *http.Request) error {
	params, err := s.restRepositoryParameters(w, r)
	if err != nil {
		return err
	}
	if _, err := s.RepositoryModelLoad(r.Context(), &inference.RepositoryModelLoadRequest{ModelName: r.PathValue("model"), Parameters: params}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

// restUnload ignores its parameters: the only one Triton defines, unload_dependents, has nothing
// to act on in infergate's registry, where models have no dependents.
func (s *Service) restUnload(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.restRepositoryParameters(w, r); err != nil {
		return err
	}
	if _, err := s.RepositoryModelUnload(r.Context(), &inference.RepositoryModelUnloadRequest{ModelName: r.PathValue("model")}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

// readBody reads the whole request body, decompressed, into one buffer that starts with headroom
// spare bytes (where a raw BYTES input gets its length prefix without a copy) and returns that
// buffer. The body may be at most the service's message limit; a compressed body inflates within
// the Inflater's bounds (max_decompressed_bytes, the ratio bound, the in-flight budget), checked as
// it inflates.
//
// A declared Content-Length beyond the limit is refused at once, but below it is not trusted with
// an allocation either: the buffer starts at up to 1 MiB and grows fourfold as bytes actually
// arrive (straight to the declared length when that is within one step), so a client that claims
// 2 GiB and sends 10 bytes costs 1 MiB, while a 16 MiB tensor costs two short copies (1 and 4 MiB)
// on its way to its final place.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request, headroom int) ([]byte, error) {
	limit := s.maxBytes
	var src io.Reader = r.Body
	known := int64(-1)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); {
	case enc == "" || enc == "identity":
		known = r.ContentLength
	case inflate.Supported(enc):
		zr, err := s.inflater.NewReader(enc, r.Body)
		if err != nil {
			return nil, inflateError(enc, err)
		}
		defer zr.Close()
		src = zr
		limit = int(min(int64(limit), s.inflater.MaxBytes()))
	default:
		w.Header().Set("Accept-Encoding", "gzip, deflate")
		return nil, &restError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("Unsupported compression type '%s'; infergate accepts gzip and deflate request bodies", enc)}
	}
	tooLarge := func(n string) error {
		return &restError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body of %s bytes exceeds the server's limit of %d bytes", n, limit)}
	}
	if known > int64(limit) {
		return nil, tooLarge(strconv.FormatInt(known, 10))
	}
	// want is the most the buffer may need: the declared length, or one byte past the limit, to
	// tell a body at the limit from one over it.
	want := limit + 1
	if known >= 0 {
		want = int(known)
	}
	const firstChunk = 1 << 20
	buf := make([]byte, headroom, headroom+min(want, firstChunk))
	for len(buf)-headroom < want {
		if len(buf) == cap(buf) {
			// Fourfold, or straight to the declared size when that is at most one step more,
			// so a body just over a power of four is not grown twice.
			have := len(buf) - headroom
			next := 4 * have
			if want <= 5*have {
				next = want
			}
			grown := make([]byte, len(buf), headroom+min(want, next))
			copy(grown, buf)
			buf = grown
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		var ie *inflate.Error
		switch {
		case err == nil, errors.Is(err, io.EOF) && len(buf)-headroom == want:
		case errors.Is(err, io.EOF) && known < 0:
			return buf, nil
		case errors.As(err, &ie):
			return nil, inflateError(r.Header.Get("Content-Encoding"), err)
		case known < 0:
			return nil, readError(err, fmt.Sprintf("after %d bytes", len(buf)-headroom))
		default:
			return nil, readError(err, fmt.Sprintf("after %d of %d bytes", len(buf)-headroom, known))
		}
	}
	if known < 0 {
		return nil, tooLarge("more than " + strconv.Itoa(limit))
	}
	return buf, nil
}

// inflateError reports a compressed body refused while inflating: 413 for a body past a bound
// (with Retry-After when the bound is the server's budget, which frees up), 400 for corrupt data,
// in Triton's words for that.
func inflateError(encoding string, err error) error {
	var ie *inflate.Error
	if !errors.As(err, &ie) {
		return readError(err, "while decompressing")
	}
	if ie.Reason == inflate.Corrupt {
		return invalid("failed to decompress the %s request body: %v", strings.ToLower(strings.TrimSpace(encoding)), ie.Err)
	}
	e := &restError{status: http.StatusRequestEntityTooLarge, msg: ie.Error()}
	if ie.Reason == inflate.Busy {
		e.header = http.Header{"Retry-After": {"1"}}
	}
	return e
}

// readError reports a body that could not be read: cut short, corrupt compressed data, or a client
// that went away.
func readError(err error, where string) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return invalid("the request body ended early, %s", where)
	case errors.Is(err, context.Canceled):
		return asStatus(err)
	}
	return invalid("failed to read the request body %s: %v", where, err)
}

// restBuffers recycles the buffers JSON responses are built in.
var restBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getRESTBuffer() *[]byte { return restBuffers.Get().(*[]byte) }

func putRESTBuffer(b *[]byte) {
	if cap(*b) <= 1<<20 { // a huge JSON tensor's buffer is not kept alive for small responses
		*b = (*b)[:0]
		restBuffers.Put(b)
	}
}
