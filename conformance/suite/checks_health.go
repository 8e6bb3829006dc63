package suite

import (
	"fmt"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func healthChecks() []Check {
	return []Check{
		{ID: "health.discovery", Title: "the server's models can be discovered", Class: Standard, Cite: v2("A compliant server must implement the health, metadata, and inference APIs described in this section."), Run: func(t *T) {
			if len(t.env.models) == 0 && t.env.listedNone {
				t.Skip("RepositoryIndex lists no ready model; name the models to check with -model")
			}
			if len(t.env.models) == 0 {
				t.Fail("ModelMetadata for at least one model from RepositoryIndex or -model", "none: "+strings.Join(t.env.discoveryErrs, "; "))
			}
			for _, e := range t.env.discoveryErrs {
				t.Warn("%s", e)
			}
			t.Note("%d models: %s", len(t.env.models), strings.Join(t.env.modelNames(), ", "))
		}},
		{ID: "health.server-live", Title: "ServerLive answers live=true", Class: Standard, Cite: citeLive, Item: 1, Run: func(t *T) {
			r, err := t.client().ServerLive(t.ctx, &inference.ServerLiveRequest{})
			t.expectOK(err, "ServerLive")
			equal(t, "ServerLive.live", true, r.GetLive())
		}},
		{ID: "health.server-ready", Title: "ServerReady answers ready=true once models are loaded", Class: Standard, Cite: v2("The “server ready” health API indicates if all the models are ready for inferencing."), Item: 2, Run: func(t *T) {
			r, err := t.client().ServerReady(t.ctx, &inference.ServerReadyRequest{})
			t.expectOK(err, "ServerReady")
			equal(t, "ServerReady.ready", true, r.GetReady())
		}},
		{ID: "health.grpc-health", Title: "grpc.health.v1.Health/Check(\"\") is SERVING while the server is ready", Class: Recommended, Cite: Citation{Source: "grpc/grpc doc/health-checking.md", Text: "The server should use an empty string as the key for server's overall health status, so that a client not interested in a specific service can query the server's status with an empty request."}, Item: 57, Run: func(t *T) {
			r, err := healthpb.NewHealthClient(t.env.conn).Check(t.ctx, &healthpb.HealthCheckRequest{})
			if s := t.expectCode(err, "Health/Check", codes.OK, codes.Unimplemented); s.Code() == codes.Unimplemented {
				t.Skip("the server does not implement the gRPC health service")
			}
			equal(t, "Health/Check status", healthpb.HealthCheckResponse_SERVING, r.GetStatus())
		}},
	}
}

func metadataChecks() []Check {
	return []Check{
		{ID: "metadata.server", Title: "ServerMetadata has a name, a version and an extension list", Class: Standard, Cite: v2("“name” : A descriptive name for the server."), Item: 3, Run: func(t *T) {
			r, err := t.client().ServerMetadata(t.ctx, &inference.ServerMetadataRequest{})
			t.expectOK(err, "ServerMetadata")
			if r.GetName() == "" {
				t.Fail("a descriptive (non-empty) name", fmt.Sprintf("name=%q", r.GetName()))
			}
			if r.GetVersion() == "" {
				t.Warn("an empty server version")
			}
			t.Note("%s %s, extensions: %s", r.GetName(), r.GetVersion(), strings.Join(r.GetExtensions(), ", "))
		}},
		{ID: "metadata.model-ready", Title: "ModelReady is true for every served model, with and without its versions", Class: Standard, Cite: v2("The ModelReady API indicates if a specific model is ready for inferencing."), Item: 4, Run: func(t *T) {
			if len(t.env.models) == 0 {
				t.Skip("no models discovered")
			}
			for _, m := range t.env.models {
				versions := append([]string{""}, m.meta.GetVersions()...)
				for _, v := range versions {
					r, err := t.client().ModelReady(t.ctx, &inference.ModelReadyRequest{Name: m.name, Version: v})
					what := fmt.Sprintf("ModelReady(%q, version %q)", m.name, v)
					t.expectOK(err, what)
					equal(t, what+".ready", true, r.GetReady())
				}
			}
		}},
		{ID: "metadata.model-ready-unknown", Title: "ModelReady on an unknown model is ready=false (or NOT_FOUND)", Class: Standard, Cite: v2proto("True if the model is ready, false if not ready."), Item: 5, Run: func(t *T) {
			r, err := t.client().ModelReady(t.ctx, &inference.ModelReadyRequest{Name: unknownModel})
			if err == nil {
				equal(t, "ModelReady(unknown).ready", false, r.GetReady())
				return
			}
			// An error is a failure of the call, not an answer: allowed as NOT_FOUND (KServe
			// python's answer; released Triton answers ready=false), never as a server fault.
			if s := t.expectRefusal(err, "ModelReady(unknown)", codes.NotFound, ""); s.Code() == codes.NotFound {
				t.Warn("NOT_FOUND instead of OK with ready=false (KServe python's answer; released Triton answers ready=false)")
			}
		}},
		{ID: "metadata.model", Title: "ModelMetadata names the model and lists well-formed inputs and outputs", Class: Standard, Cite: v2("\"datatype\" : The data-type of the tensor elements as defined in [Tensor Data Types](#tensor-data-types)."), Item: 6, Run: func(t *T) {
			if len(t.env.models) == 0 {
				t.Skip("no models discovered")
			}
			for _, m := range t.env.models {
				md := m.meta
				equal(t, fmt.Sprintf("ModelMetadata(%q).name", m.name), m.name, md.GetName())
				tensors := append(append([]*inference.ModelMetadataResponse_TensorMetadata{}, md.GetInputs()...), md.GetOutputs()...)
				for _, x := range tensors {
					if x.GetName() == "" {
						t.Fail(fmt.Sprintf("model '%s': every tensor named", m.name), "a tensor with an empty name")
					}
					if _, ok := datatypes[x.GetDatatype()]; !ok {
						t.Fail(fmt.Sprintf("model '%s' tensor '%s': a datatype from the 13-type list", m.name, x.GetName()), x.GetDatatype())
					}
					for _, d := range x.GetShape() {
						if d < -1 {
							t.Fail(fmt.Sprintf("model '%s' tensor '%s': dims >= -1", m.name, x.GetName()), fmt.Sprint(x.GetShape()))
						}
					}
				}
				if len(md.GetOutputs()) == 0 {
					t.Warn("model '%s' lists no outputs", m.name)
				}
			}
		}},
		{ID: "metadata.model-unknown", Title: "ModelMetadata on an unknown model is refused (NOT_FOUND), never OK or a server fault", Class: Standard, Cite: citeFailure, Item: 7, Run: func(t *T) {
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: unknownModel})
			t.Note("%s", describeErr(t.expectRefusal(err, "ModelMetadata(unknown)", codes.NotFound, "Request for unknown model").Err()))
		}},
		{ID: "metadata.version-unknown", Title: "ModelMetadata on a version the model does not list (\"99999\") is NOT_FOUND", Class: Recommended, Cite: citeVersion, Item: 8, Run: func(t *T) {
			m := t.generic()
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: m.name, Version: "99999"})
			t.versionRefusal(m, err, "ModelMetadata(version 99999)")
		}},
		{ID: "metadata.version-invalid", Title: "ModelMetadata on a non-integer version (\"abc\") is INVALID_ARGUMENT on Triton, whose versions are integers", Class: TritonExtension, Cite: citeNumeric, Item: 9, Run: func(t *T) {
			m := t.generic()
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: m.name, Version: "abc"})
			t.integralVersion(m, err, "ModelMetadata(version \"abc\")", "")
		}},
	}
}

// versionRefusal holds the answer to a request for version 99999 of m, which m does not list:
// NOT_FOUND, or OK from a server that does not version models (a warning either way when the
// code differs, since v2 lets a client request only the versions a model lists).
func (t *T) versionRefusal(m *model, err error, what string) *status.Status {
	if err == nil {
		if len(m.meta.GetVersions()) == 0 {
			t.Warn("%s: OK for '%s', which lists no versions: the server seems not to version models", what, m.name)
		} else {
			t.Warn("%s: OK although '%s' lists versions %v", what, m.name, m.meta.GetVersions())
		}
		return status.New(codes.OK, "")
	}
	s := t.expectRefusal(err, what, codes.NotFound, "")
	if s.Code() == codes.NotFound && t.isTriton() {
		t.expectContains(s, what, "Request for unknown model")
	}
	return s
}

// integralVersion holds the answer to a request for version "abc": Triton numbers versions and
// answers INVALID_ARGUMENT (with phrase in the message, when given). KServe v2 does not say
// versions are integers, so elsewhere NOT_FOUND passes and OK, from a server that ignores
// versions, is a warning.
func (t *T) integralVersion(m *model, err error, what, phrase string) *status.Status {
	if t.isTriton() {
		s := t.expectCode(err, what+" on Triton", codes.InvalidArgument)
		if phrase != "" {
			t.expectContains(s, what, phrase)
		}
		return s
	}
	if err == nil {
		t.Warn("%s: OK for '%s': the server does not take versions as Triton's integers (KServe v2 does not say they are)", what, m.name)
		return status.New(codes.OK, "")
	}
	s, _ := status.FromError(err)
	if s.Code() != codes.NotFound {
		s = t.expectRefusal(err, what, codes.InvalidArgument, "")
	}
	return s
}

// unknownModel is a model name no server serves.
const unknownModel = "conformance_no_such_model"
