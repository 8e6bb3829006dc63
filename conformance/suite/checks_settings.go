package suite

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/infergate/infergate/gen/inference"
)

// settingsChecks hold Triton's trace and logging extensions to their protocols. They write the
// settings they read back unchanged, so a server's tracing and logging are as they were.
func settingsChecks() []Check {
	const traceDoc, logDoc = "protocol/extension_trace.md", "protocol/extension_logging.md"
	return []Check{
		{ID: "trace.settings", Title: "TraceSetting answers the trace settings (trace_level, trace_rate, ...), globally and for a model, and an update answers the settings after it", Class: TritonExtension, Cite: triton(traceDoc, "The Trace API returns the latest trace settings."), Run: func(t *T) {
			t.requireExtension("trace")
			cur, err := t.client().TraceSetting(t.ctx, &inference.TraceSettingRequest{})
			t.expectOK(err, "TraceSetting with no settings (a read)")
			for _, name := range []string{"trace_level", "trace_rate"} {
				if len(cur.GetSettings()[name].GetValue()) == 0 {
					t.Fail(fmt.Sprintf("TraceSetting's answer has a value for '%s'", name), traceKeys(cur.GetSettings()))
				}
			}
			rate := cur.GetSettings()["trace_rate"].GetValue()
			upd, err := t.client().TraceSetting(t.ctx, &inference.TraceSettingRequest{
				Settings: map[string]*inference.TraceSettingRequest_SettingValue{"trace_rate": {Value: rate}}})
			t.expectOK(err, fmt.Sprintf("TraceSetting setting trace_rate to its current %v", rate))
			equalSlices(t, "trace_rate after setting it to its current value", rate, upd.GetSettings()["trace_rate"].GetValue())
			if len(upd.GetSettings()["trace_level"].GetValue()) == 0 {
				t.Fail("an update's answer has every setting, trace_level included", traceKeys(upd.GetSettings()))
			}
			m := t.generic()
			per, err := t.client().TraceSetting(t.ctx, &inference.TraceSettingRequest{ModelName: m.name})
			t.expectOK(err, fmt.Sprintf("TraceSetting for model '%s'", m.name))
			if len(per.GetSettings()["trace_rate"].GetValue()) == 0 {
				t.Fail(fmt.Sprintf("model '%s''s trace settings have a trace_rate", m.name), traceKeys(per.GetSettings()))
			}
			t.Note("settings: %s", traceKeys(cur.GetSettings()))
		}},
		{ID: "trace.rest", Title: "GET /v2/trace/setting answers the trace settings as a JSON object", Class: TritonExtension, Cite: triton(traceDoc, "A successful trace request is indicated by a 200 HTTP status code."), Run: func(t *T) {
			t.requireExtension("trace")
			t.requireHTTP()
			var got map[string]json.RawMessage
			t.restJSON("GET", "/v2/trace/setting", nil, 200, &got)
			for _, name := range []string{"trace_level", "trace_rate"} {
				if _, ok := got[name]; !ok {
					t.Fail(fmt.Sprintf("GET /v2/trace/setting has '%s'", name), jsonKeys(got))
				}
			}
			t.Note("settings: %s", jsonKeys(got))
		}},
		{ID: "logging.settings", Title: "LogSettings answers every log setting with its type (log_info, log_warning, log_error: bool; log_verbose_level: uint32; log_format: string), also after an update", Class: TritonExtension, Cite: triton(logDoc, "The Log Setting API returns the latest log settings."), Run: func(t *T) {
			t.requireExtension("logging")
			cur, err := t.client().LogSettings(t.ctx, &inference.LogSettingsRequest{})
			t.expectOK(err, "LogSettings with no settings (a read)")
			checkLogSettings(t, "LogSettings", cur)
			level := cur.GetSettings()["log_verbose_level"].GetUint32Param()
			upd, err := t.client().LogSettings(t.ctx, &inference.LogSettingsRequest{Settings: map[string]*inference.LogSettingsRequest_SettingValue{
				"log_verbose_level": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: level}}}})
			t.expectOK(err, fmt.Sprintf("LogSettings setting log_verbose_level to its current %d", level))
			checkLogSettings(t, "LogSettings after an update", upd)
			equal(t, "log_verbose_level after setting it to its current value", level, upd.GetSettings()["log_verbose_level"].GetUint32Param())
		}},
		{ID: "logging.rest", Title: "POST /v2/logging with one setting answers every setting's current value", Class: TritonExtension, Cite: triton(logDoc, "Note that the current values for all parameter fields are returned even though `log_verbose_level` was the only parameter that was modified."), Run: func(t *T) {
			t.requireExtension("logging")
			t.requireHTTP()
			var cur map[string]json.RawMessage
			t.restJSON("GET", "/v2/logging", nil, 200, &cur)
			level, ok := cur["log_verbose_level"]
			if !ok {
				t.Fail("GET /v2/logging has 'log_verbose_level'", jsonKeys(cur))
			}
			var got map[string]json.RawMessage
			t.restJSON("POST", "/v2/logging", []byte(`{"log_verbose_level":`+string(level)+`}`), 200, &got)
			for _, names := range [][]string{{"log_info"}, {"log_warning", "log_warnings"}, {"log_error", "log_errors"}, {"log_verbose_level"}, {"log_format"}} {
				if _, ok := got[names[0]]; !ok && (len(names) == 1 || got[names[1]] == nil) {
					t.Fail(fmt.Sprintf("POST /v2/logging's answer has '%s'", strings.Join(names, "' or '")), jsonKeys(got))
				}
			}
			equal(t, "log_verbose_level after setting it to its current value", string(level), string(got["log_verbose_level"]))
		}},
	}
}

// checkLogSettings fails unless every documented log setting is there with its type.
func checkLogSettings(t *T, what string, r *inference.LogSettingsResponse) {
	s := r.GetSettings()
	// The protocol text says log_warnings and log_errors; Triton's servers answer log_warning and
	// log_error, which is what its clients send. Either passes.
	for _, names := range [][]string{{"log_info"}, {"log_warning", "log_warnings"}, {"log_error", "log_errors"}} {
		ok := false
		for _, name := range names {
			_, ok = s[name].GetParameterChoice().(*inference.LogSettingsResponse_SettingValue_BoolParam)
			if ok {
				break
			}
		}
		if !ok {
			t.Fail(fmt.Sprintf("%s: '%s' as a bool_param", what, strings.Join(names, "' or '")), fmt.Sprintf("%v", s))
		}
	}
	if _, ok := s["log_verbose_level"].GetParameterChoice().(*inference.LogSettingsResponse_SettingValue_Uint32Param); !ok {
		t.Fail(what+": 'log_verbose_level' as a uint32_param", fmt.Sprintf("%v", s["log_verbose_level"]))
	}
	if _, ok := s["log_format"].GetParameterChoice().(*inference.LogSettingsResponse_SettingValue_StringParam); !ok {
		t.Fail(what+": 'log_format' as a string_param", fmt.Sprintf("%v", s["log_format"]))
	}
}

func traceKeys(s map[string]*inference.TraceSettingResponse_SettingValue) string {
	var names []string
	for k, v := range s {
		names = append(names, k+"="+strings.Join(v.GetValue(), ","))
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func jsonKeys(m map[string]json.RawMessage) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}
