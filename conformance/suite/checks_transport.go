package suite

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"
)

// transportChecks hold the server's gRPC transport to what KServe clients rely on: large messages,
// compression, many calls on one connection, deadlines and unknown methods.
func transportChecks() []Check {
	return []Check{
		{ID: "transport.large-5mib", Title: "a 5 MiB input is accepted (the server does not keep grpc-go's 4 MiB limit)", Class: Recommended, Cite: citeLarge, Item: 39, Run: func(t *T) {
			largeInput(t, 5<<20, "5 MiB")
		}},
		{ID: "transport.large-64mib", Title: "a 64 MiB input is accepted and, through an identity, returned intact", Class: Recommended, Cite: citeLarge, Item: 39, Run: func(t *T) {
			largeInput(t, 64<<20, "64 MiB")
		}},
		{ID: "transport.gzip", Title: "a gzip-compressed request is answered like the uncompressed one", Class: TritonExtension, Cite: triton("customization_guide/inference_protocols.md", "Triton allows the on-wire compression of request/response messages by exposing following option on server-side:"), Item: 40, Run: func(t *T) {
			m := t.generic()
			plain := t.mustInfer(validRequest(m))
			gz, err := t.client().ModelInfer(t.ctx, validRequest(m), grpc.UseCompressor(gzip.Name))
			if err != nil && !t.isTriton() {
				// gRPC lets a server without gzip answer UNIMPLEMENTED; Triton decompresses gzip.
				t.Warn("gzip-compressed ModelInfer on '%s': %s (Triton accepts gzip)", m.name, describeErr(err))
				return
			}
			t.expectOK(err, fmt.Sprintf("gzip-compressed ModelInfer on '%s'", m.name))
			sameOutputs(t, "gzip-compressed ModelInfer", plain, gz)
			t.Note("model '%s'", m.name)
		}},
		{ID: "transport.deflate", Title: "a deflate-compressed request (Triton's clients' -C deflate) is answered like the uncompressed one, and not in an encoding the client did not accept", Class: TritonExtension, Cite: triton("customization_guide/inference_protocols.md", "Triton allows the on-wire compression of request/response messages by exposing following option on server-side:"), Item: 40, Run: func(t *T) {
			m := t.generic()
			plain := t.mustInfer(validRequest(m))
			res, err := t.client().ModelInfer(t.ctx, validRequest(m), grpc.UseCompressor("deflate"))
			if status.Code(err) == codes.Unimplemented && !t.isTriton() {
				// gRPC's answer from a server without deflate; Triton's gRPC core has it.
				t.Skip("the server does not accept deflate: %s", describeErr(err))
				return
			}
			t.expectOK(err, fmt.Sprintf("deflate-compressed ModelInfer on '%s'", m.name))
			sameOutputs(t, "deflate-compressed ModelInfer", plain, res)
			// gRPC's compression doc: a server compresses only with an encoding the client
			// listed in grpc-accept-encoding. grpc-go's client refuses any other answer.
			res, err = t.client().ModelInfer(t.ctx, validRequest(m), grpc.UseCompressor("deflate"), experimental.AcceptCompressors(gzip.Name))
			if err != nil {
				t.Warn("deflate-compressed ModelInfer from a client accepting only gzip: %s (answer uncompressed or in gzip)", describeErr(err))
			} else {
				sameOutputs(t, "deflate-compressed ModelInfer accepting only gzip", plain, res)
			}
			t.Note("model '%s'", m.name)
		}},
		{ID: "transport.concurrent-200", Title: "200 concurrent ModelInfer calls on one connection all succeed with their own ids", Class: Standard, Cite: citeID, Item: 41, Run: func(t *T) {
			m := t.generic()
			ref := t.mustInfer(validRequest(m))
			const n = 200
			resps, errs := make([]*inference.ModelInferResponse, n), make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					req := validRequest(m)
					req.Id = fmt.Sprintf("conformance-concurrent-%d", i)
					resps[i], errs[i] = t.client().ModelInfer(t.ctx, req)
				})
			}
			wg.Wait()
			for i := range n {
				what := fmt.Sprintf("concurrent ModelInfer %d of %d", i+1, n)
				t.expectOK(errs[i], what)
				equal(t, what+" response id", fmt.Sprintf("conformance-concurrent-%d", i), resps[i].GetId())
				sameOutputs(t, what, ref, resps[i])
			}
			t.Note("model '%s'", m.name)
		}},
		{ID: "transport.deadline", Title: "a 1 ms client deadline ends a slow call with DEADLINE_EXCEEDED and the server stays healthy", Class: Standard, Cite: citeLive, Item: 42, Run: func(t *T) {
			var req *inference.ModelInferRequest
			desc := ""
			if target, ok := t.largeInputModel(); ok {
				// 3 MiB stays under grpc-go's default limit, so this check does not depend on
				// transport.large-5mib.
				req, _ = largeRequest(target, 3<<20)
				desc = fmt.Sprintf("3 MiB inputs to '%s'", target.m.name)
			} else {
				req = validRequest(t.generic())
				desc = fmt.Sprintf("small inputs to '%s'", req.GetModelName())
			}
			const calls = 8
			errs := make([]error, calls)
			ctx, cancel := context.WithTimeout(t.ctx, time.Millisecond)
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() { _, errs[i] = t.client().ModelInfer(ctx, req) })
			}
			wg.Wait()
			cancel()
			exceeded := 0
			for i, err := range errs {
				switch status.Code(err) {
				case codes.DeadlineExceeded:
					exceeded++
				case codes.OK:
				default:
					t.Fail(fmt.Sprintf("ModelInfer %d under a 1 ms deadline: DEADLINE_EXCEEDED (or OK when in time)", i+1), describeErr(err))
				}
			}
			live, err := t.client().ServerLive(t.ctx, &inference.ServerLiveRequest{})
			t.expectOK(err, "ServerLive after the deadline")
			equal(t, "ServerLive.live after the deadline", true, live.GetLive())
			m := t.generic()
			t.mustInfer(validRequest(m))
			if exceeded == 0 {
				// Nothing wrong was seen, and nothing about deadlines either: no verdict.
				t.Skip("all %d calls (%s) answered within 1 ms: the requests were too fast to test the deadline", calls, desc)
			}
			t.Note("%d of %d calls with %s ended with DEADLINE_EXCEEDED; the server then answered ServerLive and ModelInfer", exceeded, calls, desc)
		}},
		{ID: "transport.unknown-method", Title: "an unknown method of GRPCInferenceService is UNIMPLEMENTED", Class: Standard, Cite: grpcDoc("Method not found at server"), Item: 43, Run: func(t *T) {
			err := t.env.conn.Invoke(t.ctx, "/inference.GRPCInferenceService/ConformanceNoSuchMethod",
				&inference.ServerLiveRequest{}, &inference.ServerLiveResponse{})
			t.expectCode(err, "/inference.GRPCInferenceService/ConformanceNoSuchMethod", codes.Unimplemented)
		}},
	}
}

// largeInput sends an input of about size bytes to the model best suited to it and, when that
// model looks like an identity, compares the output with the input.
func largeInput(t *T, size int, label string) {
	target, ok := t.largeInputModel()
	if !ok {
		t.Skip("no model has exactly one input with a variable (-1) non-batch dimension of a fixed-size datatype")
	}
	req, data := largeRequest(target, size)
	in := req.Inputs[target.in]
	what := fmt.Sprintf("ModelInfer on '%s' with a %s input (%s %v)", target.m.name, label, in.Datatype, in.Shape)
	start := time.Now()
	resp, err := t.infer(req)
	if status.Code(err) == codes.ResourceExhausted {
		t.Fail(what+": OK", describeErr(err)+" (the server keeps grpc-go's default 4 MiB receive limit; KServe servers accept INT32_MAX as Triton does)")
	}
	t.expectOK(err, what)
	elapsed := time.Since(start)
	if !target.identity {
		t.Note("'%s' accepted %d bytes in %s", target.m.name, len(data), elapsed.Round(time.Millisecond))
		return
	}
	if len(resp.GetOutputs()) != 1 {
		t.Fail(what+": the identity's one output", fmt.Sprintf("%d outputs", len(resp.GetOutputs())))
	}
	out := resp.GetOutputs()[0]
	if !slices.Equal(out.GetShape(), in.Shape) {
		t.Fail(fmt.Sprintf("%s: output shape %v", what, in.Shape), fmt.Sprint(out.GetShape()))
	}
	got, err := outputData(resp, 0)
	if err != nil {
		t.Fail(what+": output data", err.Error())
	}
	if !bytes.Equal(got, data) {
		t.Fail(fmt.Sprintf("%s: output equal to the %d input bytes", what, len(data)),
			fmt.Sprintf("%d bytes, first difference at byte %d", len(got), firstDiff(data, got)))
	}
	t.Note("identity '%s' returned %d bytes intact in %s", target.m.name, len(data), elapsed.Round(time.Millisecond))
}
