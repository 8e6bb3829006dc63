package tracing_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/infergate/infergate/core/tracing"
)

// FuzzSettingsJSON: any body of POST /v2/trace/setting or /v2/logging is parsed and applied
// without panicking; a refused request changes nothing; accepted settings read back in range.
func FuzzSettingsJSON(f *testing.F) {
	for _, s := range []string{
		`{"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"10","trace_count":"-1","log_frequency":"0"}`,
		`{"trace_level":["OFF"]}`, `{"trace_rate":null}`, `{"trace_count":"-2"}`, `{"trace_rate":99999999999}`,
		`{"trace_file":"x"}`, `{"trace_level":"TIMESTAMPS"}`, `{"trace_rate":[]}`, `{}`, ``, `[`, `null`,
		`{"log_info":false,"log_verbose_level":3,"log_format":"ISO8601"}`, `{"log_file":""}`, `{"log_verbose_level":-1}`,
		`{"log_error":null}`, `{"trace_rate":" +7x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, err := tracing.New(context.Background(), tracing.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if settings, err := tracing.ParseTraceJSON(body); err == nil {
			before := tr.Get("m")
			if _, err := tr.Update("m", settings); err != nil {
				if got := tr.Get("m"); !equal(got, before) {
					t.Fatalf("refused update changed settings: %v -> %v", before, got)
				}
			}
			if _, err := tr.Update("", settings); err == nil {
				if lv := tr.Get("")[tracing.SettingLevel]; len(lv) == 0 {
					t.Fatal("no trace level")
				}
			}
		}
		lv := new(slog.LevelVar)
		logs := tracing.NewLogs(lv)
		if settings, err := tracing.ParseLogJSON(body); err == nil {
			before := lv.Level()
			if _, err := logs.Update(settings); err != nil && lv.Level() != before {
				t.Fatal("refused log settings changed the level")
			}
		}
	})
}

func equal(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}
