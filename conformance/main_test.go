package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/conformance/internal/fixture"
	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
)

func TestCommandReports(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{})
	dir := t.TempDir()
	jsonPath, junitPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.xml")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-grpc", srv.Addr, "-run", `^(health|metadata)\.`, "-json", jsonPath, "-junit", junitPath, "-color", "never"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	out := stdout.String()
	require.Contains(t, out, "HEALTH")
	require.Contains(t, out, "PASS  health.server-live")
	require.NotContains(t, out, "builtin.", "-run selects checks")
	require.NotContains(t, out, "\x1b[", "-color never")
	require.Regexp(t, `\n\d+ passed, 0 failed, \d+ warned, \d+ skipped in `, out)

	var rep struct {
		Results []struct {
			ID, Outcome string
			Citation    struct{ Source, Text string }
		}
		Summary struct{ Passed, Failed int }
	}
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.NotEmpty(t, rep.Results)
	require.Equal(t, len(rep.Results), rep.Summary.Passed)
	for _, res := range rep.Results {
		require.NotEmpty(t, res.Citation.Text, res.ID)
		require.NotEmpty(t, res.Citation.Source, res.ID)
	}

	var junit struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name       string `xml:"name,attr"`
				Properties []struct {
					Name  string `xml:"name,attr"`
					Value string `xml:"value,attr"`
				} `xml:"properties>property"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err = os.ReadFile(junitPath)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &junit))
	require.Equal(t, len(rep.Results), junit.Tests)
	require.Zero(t, junit.Failures)
	require.Equal(t, "health", junit.Suites[0].Name)
	props := junit.Suites[0].Cases[0].Properties
	require.Len(t, props, 3)
	require.Equal(t, "citation", props[1].Name)
	require.NotEmpty(t, props[1].Value)
}

func TestCommandFailsWhenACheckFails(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{})
	var stdout, stderr bytes.Buffer
	// A model the server does not have: discovery fails, so the command must exit 1.
	code := run([]string{"-grpc", srv.Addr, "-model", "no_such_model", "-run", `^health\.discovery$`}, &stdout, &stderr)
	require.Equal(t, 1, code, stdout.String())
	require.Contains(t, stdout.String(), "FAIL  health.discovery")
	require.Contains(t, stdout.String(), "0 passed, 1 failed")
}

func TestCommandUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run(nil, &stdout, &stderr))
	require.Contains(t, stderr.String(), "usage: conformance -grpc HOST:PORT")
	stderr.Reset()
	require.Equal(t, 2, run([]string{"-grpc", "x:1", "-run", "("}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "-run")
	stdout.Reset()
	require.Equal(t, 0, run([]string{"-list"}, &stdout, &stderr))
	require.True(t, strings.HasPrefix(stdout.String(), "health.discovery"), stdout.String())
	// Every check is listed with the sentence it enforces and its source.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 2*len(suite.Checks()))
	for i := 1; i < len(lines); i += 2 {
		require.Regexp(t, `^    ".+" \(\S+ .+\)$`, lines[i])
	}
}

// TestCommandNeedsModels: a server that cannot list its models (no RepositoryIndex) makes -model
// required, a usage error (exit 2), not a failed check.
func TestCommandNeedsModels(t *testing.T) {
	srv := fixture.Minimal(t, fixture.Options{})
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"-grpc", srv.GRPCAddr}, &stdout, &stderr), stdout.String())
	require.Contains(t, stderr.String(), "name the models to check (-model)")
	require.Contains(t, stderr.String(), "usage: conformance")
	stdout.Reset()
	require.Equal(t, 0, run([]string{"-grpc", srv.GRPCAddr, "-model", "simple", "-run", `^(health|infer)\.`, "-color", "never"}, &stdout, &stderr), stdout.String())
	require.Contains(t, stdout.String(), "PASS  health.discovery")
}
