package kserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// Triton's trace and logging extensions, backed by the tracing package: the trace settings decide
// which requests get an OpenTelemetry span, the log settings set the process's slog level. A
// service without a Tracer (or a LevelVar) answers the extension's RPC UNIMPLEMENTED and its REST
// routes 501, and does not advertise it.

const (
	extTrace   = "trace"
	extLogging = "logging"
)

// WithTracing turns on the trace extension and request spans: TraceSetting and
// /v2[/models/{m}]/trace/setting read and change t's settings, and the service's handlers (Connect,
// REST, native gRPC) start a span per request as t decides.
func WithTracing(t *tracing.Tracer) Option { return func(s *Service) { s.tracer = t } }

// WithLogLevel turns on the logging extension: LogSettings and /v2/logging set lv, the level the
// process's slog handler reads.
func WithLogLevel(lv *slog.LevelVar) Option {
	return func(s *Service) {
		if lv != nil {
			s.logs = tracing.NewLogs(lv)
		}
	}
}

// settingsError gives a settings error its status: UNIMPLEMENTED for what infergate cannot honour,
// INVALID_ARGUMENT otherwise, with Triton's message.
func settingsError(err error) error {
	var u tracing.Unsupported
	if errors.As(err, &u) {
		return connect.NewError(connect.CodeUnimplemented, err)
	}
	return connect.NewError(connect.CodeInvalidArgument, err)
}

// traceModel checks the model a trace setting request names, in Triton's words.
func (s *Service) traceModel(ctx context.Context, model string) error {
	if model == "" {
		return nil
	}
	if e, err := s.reg.ResolveFor(ctx, model, ""); err != nil || !e.Ready() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("Request for unknown model : %s", model))
	}
	return nil
}

func (s *Service) TraceSetting(ctx context.Context, req *inference.TraceSettingRequest) (*inference.TraceSettingResponse, error) {
	if s.tracer == nil {
		return nil, unimplemented(extTrace)
	}
	settings := make(map[string][]string, len(req.GetSettings()))
	for k, v := range req.GetSettings() {
		settings[k] = v.GetValue()
	}
	out, err := s.traceSetting(ctx, req.GetModelName(), settings, false)
	if err != nil {
		return nil, err
	}
	res := &inference.TraceSettingResponse{Settings: make(map[string]*inference.TraceSettingResponse_SettingValue, len(out))}
	for k, v := range out {
		res.Settings[k] = &inference.TraceSettingResponse_SettingValue{Value: v}
	}
	return res, nil
}

// traceSetting reads (no settings) or changes model's trace settings. clearEmpty: an empty
// request for a model removes its settings (REST's rule).
func (s *Service) traceSetting(ctx context.Context, model string, settings map[string][]string, clearEmpty bool) (map[string][]string, error) {
	if err := s.traceModel(ctx, model); err != nil {
		return nil, err
	}
	if len(settings) == 0 && !(clearEmpty && model != "") {
		return s.tracer.Get(model), nil
	}
	if len(settings) == 0 {
		settings = map[string][]string{tracing.SettingLevel: {}, tracing.SettingRate: {}, tracing.SettingCount: {}, tracing.SettingLogFrequency: {}}
	}
	out, err := s.tracer.Update(model, settings)
	if err != nil {
		return nil, settingsError(err)
	}
	return out, nil
}

func (s *Service) LogSettings(_ context.Context, req *inference.LogSettingsRequest) (*inference.LogSettingsResponse, error) {
	if s.logs == nil {
		return nil, unimplemented(extLogging)
	}
	var out map[string]tracing.LogValue
	if len(req.GetSettings()) == 0 {
		out = s.logs.Get()
	} else {
		in := make(map[string]tracing.LogValue, len(req.GetSettings()))
		for k, v := range req.GetSettings() {
			var lv tracing.LogValue
			switch c := v.GetParameterChoice().(type) {
			case *inference.LogSettingsRequest_SettingValue_BoolParam:
				lv.Bool = &c.BoolParam
			case *inference.LogSettingsRequest_SettingValue_Uint32Param:
				lv.Uint32 = &c.Uint32Param
			case *inference.LogSettingsRequest_SettingValue_StringParam:
				lv.String = &c.StringParam
			}
			in[k] = lv
		}
		var err error
		if out, err = s.logs.Update(in); err != nil {
			return nil, settingsError(err)
		}
	}
	res := &inference.LogSettingsResponse{Settings: make(map[string]*inference.LogSettingsResponse_SettingValue, len(out))}
	for k, v := range out {
		sv := &inference.LogSettingsResponse_SettingValue{}
		switch {
		case v.Bool != nil:
			sv.ParameterChoice = &inference.LogSettingsResponse_SettingValue_BoolParam{BoolParam: *v.Bool}
		case v.Uint32 != nil:
			sv.ParameterChoice = &inference.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: *v.Uint32}
		case v.String != nil:
			sv.ParameterChoice = &inference.LogSettingsResponse_SettingValue_StringParam{StringParam: *v.String}
		}
		res.Settings[k] = sv
	}
	return res, nil
}

// readSettingsBody reads a settings request body, at most tracing.MaxSettingsBody bytes.
func readSettingsBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, tracing.MaxSettingsBody+1))
	if err != nil {
		return nil, readError(err, "")
	}
	if len(body) > tracing.MaxSettingsBody {
		return nil, &restError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body exceeds the settings limit of %d bytes", tracing.MaxSettingsBody)}
	}
	return body, nil
}

// restTrace serves GET and POST /v2[/models/{model}]/trace/setting: the settings as an object of
// strings, trace_level an array.
func (s *Service) restTrace(w http.ResponseWriter, r *http.Request) error {
	if s.tracer == nil {
		return unimplemented(extTrace)
	}
	var settings map[string][]string
	if r.Method == http.MethodPost {
		body, err := readSettingsBody(r)
		if err != nil {
			return err
		}
		if settings, err = tracing.ParseTraceJSON(body); err != nil {
			return invalid("%s", err.Error())
		}
	}
	out, err := s.traceSetting(r.Context(), r.PathValue("model"), settings, r.Method == http.MethodPost)
	if err != nil {
		return err
	}
	b := []byte{'{'}
	for i, k := range sortedKeys(out) {
		if i > 0 {
			b = append(b, ',')
		}
		b = tensor.AppendJSONString(b, k)
		b = append(b, ':')
		if k == tracing.SettingLevel {
			b = append(b, '[')
			for j, v := range out[k] {
				if j > 0 {
					b = append(b, ',')
				}
				b = tensor.AppendJSONString(b, v)
			}
			b = append(b, ']')
			continue
		}
		v := ""
		if len(out[k]) > 0 {
			v = out[k][0]
		}
		b = tensor.AppendJSONString(b, v)
	}
	writeJSON(w, http.StatusOK, append(b, '}'))
	return nil
}

// restLogging serves GET and POST /v2/logging.
func (s *Service) restLogging(w http.ResponseWriter, r *http.Request) error {
	if s.logs == nil {
		return unimplemented(extLogging)
	}
	out := s.logs.Get()
	if r.Method == http.MethodPost {
		body, err := readSettingsBody(r)
		if err != nil {
			return err
		}
		in, err := tracing.ParseLogJSON(body)
		if err != nil {
			return invalid("%s", err.Error())
		}
		if len(in) > 0 {
			if out, err = s.logs.Update(in); err != nil {
				return settingsError(err)
			}
		}
	}
	b := []byte{'{'}
	for i, k := range sortedKeys(out) {
		if i > 0 {
			b = append(b, ',')
		}
		b = tensor.AppendJSONString(b, k)
		b = append(b, ':')
		switch v := out[k]; {
		case v.Bool != nil:
			b = strconv.AppendBool(b, *v.Bool)
		case v.Uint32 != nil:
			b = strconv.AppendUint(b, uint64(*v.Uint32), 10)
		case v.String != nil:
			b = tensor.AppendJSONString(b, *v.String)
		default:
			b = append(b, "null"...)
		}
	}
	writeJSON(w, http.StatusOK, append(b, '}'))
	return nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
