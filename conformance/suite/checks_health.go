package suite

import (
	"fmt"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func healthChecks() []Check {
	return []Check{
		{ID: "health.discovery", Title: "the server's models can be discovered", Class: Standard, Cite: v2("A compliant server must implement the health, metadata, and inference APIs described in this section."), Run: func(t *T) {
			if len(t.env.models) == 0 {
				t.Fail("at least one model from RepositoryIndex or -model", "none: "+strings.Join(t.env.discoveryErrs, "; "))
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
		{ID: "health.grpc-health", Title: "grpc.health.v1.Health/Check(\"\") is SERVING while the server is ready", Class: Recommended, Cite: Citation{Source: "grpc/grpc doc/health-checking.md", Text: "The server should register all the services manually and set the individual status, including an empty service name and its status."}, Item: 57, Run: func(t *T) {
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
			if r.GetName() == "" || r.GetVersion() == "" {
				t.Fail("non-empty name and version", fmt.Sprintf("name=%q version=%q", r.GetName(), r.GetVersion()))
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
			s := t.expectCode(err, "ModelReady(unknown)", codes.OK, codes.NotFound)
			if s.Code() == codes.NotFound {
				t.Warn("NOT_FOUND instead of OK with ready=false (KServe python's answer; released Triton answers ready=false)")
				return
			}
			equal(t, "ModelReady(unknown).ready", false, r.GetReady())
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
					t.Fail(fmt.Sprintf("model '%s': at least one output", m.name), "none")
				}
			}
		}},
		{ID: "metadata.model-unknown", Title: "ModelMetadata on an unknown model is NOT_FOUND", Class: Standard, Cite: citeFailure, Item: 7, Run: func(t *T) {
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: unknownModel})
			s := t.expectCode(err, "ModelMetadata(unknown)", codes.NotFound)
			if t.isTriton() {
				t.expectContains(s, "ModelMetadata(unknown)", "Request for unknown model")
			}
		}},
		{ID: "metadata.version-unknown", Title: "ModelMetadata on an unknown version is NOT_FOUND", Class: Recommended, Cite: citeVersion, Item: 8, Run: func(t *T) {
			m := t.generic()
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: m.name, Version: "99999"})
			if s := t.expectCode(err, "ModelMetadata(version 99999)", codes.NotFound, codes.OK); s.Code() == codes.OK {
				t.Warn("OK for version 99999: the server seems not to version models")
			}
		}},
		{ID: "metadata.version-invalid", Title: "ModelMetadata on a non-integer version is INVALID_ARGUMENT", Class: TritonExtension, Cite: citeNumeric, Item: 9, Run: func(t *T) {
			m := t.generic()
			_, err := t.client().ModelMetadata(t.ctx, &inference.ModelMetadataRequest{Name: m.name, Version: "abc"})
			if s := t.expectCode(err, "ModelMetadata(version abc)", codes.InvalidArgument, codes.NotFound); s.Code() == codes.NotFound {
				t.Warn("NOT_FOUND for version \"abc\"; Triton answers INVALID_ARGUMENT")
			}
		}},
	}
}

// unknownModel is a model name no server serves.
const unknownModel = "conformance_no_such_model"
