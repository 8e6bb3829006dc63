package suite_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/infergate/infergate/conformance/internal/fixture"
	"github.com/infergate/infergate/conformance/suite"
	"github.com/stretchr/testify/require"
)

// runFixture runs the whole suite against a fixture (under -short without the 64 MiB message) and
// logs the table.
func runFixture(t *testing.T, srv *fixture.Server, cfg suite.Config) *suite.Report {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPURL, cfg.Models = srv.GRPCAddr, srv.HTTPURL, srv.Models
	if testing.Short() && cfg.Run == nil {
		cfg.Run = allBut("transport.large-64mib")
	}
	rep, err := suite.Run(context.Background(), cfg)
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table, false))
	t.Log("\n" + table.String())
	return rep
}

// allBut selects every check but the named ones.
func allBut(ids ...string) *regexp.Regexp {
	var keep []string
	for _, c := range suite.Checks() {
		if !slices.Contains(ids, c.ID) {
			keep = append(keep, regexp.QuoteMeta(c.ID))
		}
	}
	return regexp.MustCompile("^(" + strings.Join(keep, "|") + ")$")
}

// outcomes maps check IDs to outcomes.
func outcomes(rep *suite.Report) map[string]suite.Outcome {
	out := map[string]suite.Outcome{}
	for _, res := range rep.Results {
		out[res.ID] = res.Outcome
	}
	return out
}

// TestMinimalServer runs the suite against a server that implements only what KServe v2 requires,
// with every variation the text allows: nothing may fail, and the spec-allowed behaviours that
// once failed (issue 25) are warnings or passes.
func TestMinimalServer(t *testing.T) {
	t.Parallel()
	rep := runFixture(t, fixture.Minimal(t, fixture.Options{}), suite.Config{})
	require.Empty(t, failures(rep), "failed checks:\n%s", describe(rep, failures(rep)))
	got := outcomes(rep)
	for id, want := range map[string]suite.Outcome{
		"health.discovery":         suite.Pass, // named with -model: no RepositoryIndex needed
		"metadata.version-invalid": suite.Warn, // "abc" answered OK: v2 does not say versions are integers
		"infer.version-invalid":    suite.Warn,
		"infer.version-unknown":    suite.Warn,
		"infer.basic":              suite.Pass, // empty model_version on a model without versions
		"infer.id":                 suite.Warn, // a generated id for a request without one
		"infer.raw-outputs":        suite.Pass, // raw outputs for raw requests (typed for typed)
		"builtin.simple":           suite.Pass, // no versions
		"builtin.simple-batch":     suite.Pass, // batch 9 not sent without a ModelConfig
		"validate.raw-size":        suite.Warn, // FAILED_PRECONDITION instead of INVALID_ARGUMENT
		"validate.batch-size":      suite.Skip, // no ModelConfig
		"params.custom-kinds":      suite.Pass, // unknown parameters ignored
		"rest.same-error-as-grpc":  suite.Warn, // infergate's convention
		"config.model":             suite.Skip,
		"stream.pipelined":         suite.Skip,
		"data.bytes-roundtrip":     suite.Pass,
		"data.bool":                suite.Pass,
	} {
		require.Equal(t, want, got[id], "%s", id)
	}
	for _, res := range rep.Results {
		require.NotEmpty(t, res.Citation.Text, res.ID)
		if res.Outcome == suite.Skip {
			require.NotEmpty(t, res.Message, "%s skipped without a reason", res.ID)
		}
	}
}

// TestNonConformantServer runs the suite against the minimal server with the two real
// non-conformances KServe 0.20 showed: exactly the checks about them fail.
func TestNonConformantServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   fixture.Options
		failed []string
	}{
		{"ignores-outputs", fixture.Options{IgnoreOutputs: true}, []string{"infer.select-output", "infer.unknown-output"}},
		{"internal-on-malformed", fixture.Options{InternalOnMalformed: true}, []string{
			"validate.raw-too-few", "validate.raw-and-typed", "validate.typed-wrong-field", "validate.typed-count",
			"validate.raw-size", "validate.bytes-framing", "validate.bytes-count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := runFixture(t, fixture.Minimal(t, tc.opts), suite.Config{})
			require.ElementsMatch(t, tc.failed, failures(rep), "failed checks:\n%s", describe(rep, failures(rep)))
		})
	}
}

// TestModelsRequired: without -model, a server that cannot list its models is a usage error, not
// a failed check.
func TestModelsRequired(t *testing.T) {
	t.Parallel()
	srv := fixture.Minimal(t, fixture.Options{})
	_, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.GRPCAddr})
	require.True(t, errors.Is(err, suite.ErrModelsRequired), "%v", err)
	require.Contains(t, err.Error(), "UNIMPLEMENTED")
}

// TestRESTHealthBodies: rest.health passes a 200 with Triton's empty body and with KServe's
// {"live": true} / {"ready": true}, fails a 200 whose JSON says false, and warns on any other
// body (v2 says it should be empty; KServe's client cannot read it).
func TestRESTHealthBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		bodies map[string]string
		want   suite.Outcome
	}{
		{"kserve-json", nil, suite.Pass},
		{"triton-empty", map[string]string{"/v2/health/live": "", "/v2/health/ready": ""}, suite.Pass},
		{"json-false", map[string]string{"/v2/health/live": `{"live": true}`, "/v2/health/ready": `{"ready": false}`}, suite.Fail},
		{"text", map[string]string{"/v2/health/live": "OK", "/v2/health/ready": ""}, suite.Warn},
		{"json-other", map[string]string{"/v2/health/live": `{"status": "alive"}`, "/v2/health/ready": ""}, suite.Warn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := runFixture(t, fixture.Minimal(t, fixture.Options{HealthBodies: tc.bodies}), suite.Config{Run: regexp.MustCompile(`^rest\.health$`)})
			res, ok := rep.Result("rest.health")
			require.True(t, ok)
			require.Equal(t, tc.want, res.Outcome, "%s %s %s", res.Message, res.Expect, res.Got)
		})
	}
}
