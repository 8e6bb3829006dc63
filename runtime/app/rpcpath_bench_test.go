package app

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/lib/tensor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkRPCPath checks issue 39's other condition: what was done for the OpenAI routes' HTTP/1
// hot path must not slow KServe's ModelInfer over native gRPC or over Connect. It runs this
// binary and INFERGATE_HOTPATH_BASELINE (another build: the commit before a change, or before
// the issue) with the zero config (the built-in models), in interleaved rounds as
// BenchmarkHotPath does: a fresh process per arm and round, each load measured in slices with
// the arms taking turns. Run it alone:
//
//	INFERGATE_HOTPATH_BASELINE=/tmp/infergate-old go test ./runtime/app -run '^$' -bench RPCPath -benchtime 1x -v
//
// The loads, on `simple`: ModelInfer from grpc-go over one HTTP/2 connection, and from
// connect-go over HTTP/1.1 (which the gateway's own HTTP/1 server takes, then hands to the
// Connect handler), each at c=1 (median latency) and c=16 (requests a second).
// INFERGATE_HOTPATH_ROUNDS (default 5) and INFERGATE_HOTPATH_SECONDS (default 2, per arm and
// load) set its length. Reported: each arm's medians over the rounds, and for each load new
// against baseline, the median of the rounds' own ratios (latency: under 1 is faster; rate:
// over 1 is faster).
func BenchmarkRPCPath(b *testing.B) {
	old := os.Getenv("INFERGATE_HOTPATH_BASELINE")
	if old == "" {
		b.Skip("INFERGATE_HOTPATH_BASELINE names no binary to compare with")
	}
	rounds, seconds := envInt(b, "INFERGATE_HOTPATH_ROUNDS", 5), envInt(b, "INFERGATE_HOTPATH_SECONDS", 2)
	bin := filepath.Join(b.TempDir(), "infergate")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	arms := []struct{ name, bin string }{{"infergate", bin}, {"baseline", old}}
	grpcCall := func(c *rpcClients) func(context.Context) error { return c.grpc }
	connectCall := func(c *rpcClients) func(context.Context) error { return c.connect }
	loads := []struct {
		name        string
		concurrency int
		call        func(*rpcClients) func(context.Context) error
	}{{"grpc-c1", 1, grpcCall}, {"grpc-c16", 16, grpcCall}, {"connect-c1", 1, connectCall}, {"connect-c16", 16, connectCall}}
	const slicesPerLoad = 4
	slice := time.Duration(seconds) * time.Second / slicesPerLoad
	// results[load][arm][round]: the c=1 loads' median latency (µs), the c=16 loads' rate.
	results := make([][][]float64, len(loads))
	for l := range results {
		results[l] = make([][]float64, len(arms))
	}
	for r := range rounds {
		clients := make([]*rpcClients, len(arms))
		for i, a := range arms {
			clients[i] = startRPCArm(b, a.bin)
		}
		for l, ld := range loads {
			lats := make([][]float64, len(arms))
			n, t := make([]float64, len(arms)), make([]float64, len(arms))
			for sl := range slicesPerLoad {
				for k := range arms {
					i := (k + sl + r) % len(arms)
					rate, lat := rpcLoad(b, ld.call(clients[i]), ld.concurrency, slice)
					lats[i] = append(lats[i], lat...)
					n[i] += float64(len(lat))
					t[i] += float64(len(lat)) / rate
				}
			}
			for i := range arms {
				v := n[i] / t[i]
				if ld.concurrency == 1 {
					v = median(lats[i])
				}
				results[l][i] = append(results[l][i], v)
			}
		}
		for i, a := range arms {
			clients[i].stop()
			b.Logf("round %d %-10s grpc c=1 p50 %6.1f µs, c=16 %6.0f req/s   connect c=1 p50 %6.1f µs, c=16 %6.0f req/s", r+1, a.name,
				results[0][i][r], results[1][i][r], results[2][i][r], results[3][i][r])
		}
	}
	for l, ld := range loads {
		unit := "req/s"
		if ld.concurrency == 1 {
			unit = "p50-us"
		}
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = results[l][0][r] / results[l][1][r]
		}
		for i, a := range arms {
			b.ReportMetric(median(results[l][i]), a.name+"-"+ld.name+"-"+unit)
		}
		b.ReportMetric(median(ratios), ld.name+"-x-baseline")
	}
}

// rpcClients calls one started binary's ModelInfer; stop ends the binary.
type rpcClients struct {
	grpc, connect func(context.Context) error
	stop          func()
}

// startRPCArm starts bin with the zero config and returns clients of it once `simple` answers.
func startRPCArm(b *testing.B, bin string) *rpcClients {
	addr := freeAddrB(b)
	cmd := exec.Command(bin, "-listen", addr, "-log-level", "error")
	cmd.Stderr = os.Stderr
	in := startArm(b, cmd, addr, "")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	cc := inferenceconnect.NewGRPCInferenceServiceClient(hc, "http://"+addr)
	req := simpleRequest()
	check := func(res *inference.ModelInferResponse) error {
		if raw := res.GetRawOutputContents(); len(raw) == 2 {
			if sum := tensor.View[int32](raw[0]); len(sum) == 16 && sum[1] == 2 {
				return nil
			}
		}
		return errWrongAnswer
	}
	c := &rpcClients{
		grpc: func(ctx context.Context) error {
			res := new(inference.ModelInferResponse)
			if err := conn.Invoke(ctx, inference.GRPCInferenceService_ModelInfer_FullMethodName, req, res); err != nil {
				return err
			}
			return check(res)
		},
		connect: func(ctx context.Context) error {
			res, err := cc.ModelInfer(ctx, req)
			if err != nil {
				return err
			}
			return check(res)
		},
		stop: func() { conn.Close(); hc.CloseIdleConnections(); in.stop() },
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.answers() {
		if time.Now().After(deadline) {
			b.Fatalf("%s never answered ModelInfer on simple", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// answers reports whether both clients get simple's answer within a second each.
func (c *rpcClients) answers() bool {
	for _, call := range []func(context.Context) error{c.grpc, c.connect} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := call(ctx)
		cancel()
		if err != nil {
			return false
		}
	}
	return true
}

var errWrongAnswer = errors.New("simple's answer is wrong")

// simpleRequest is ModelInfer on `simple` as Triton's example client sends it: INPUT0 = 0..15,
// INPUT1 = ones (OUTPUT0 = INPUT0 + INPUT1).
func simpleRequest() *inference.ModelInferRequest {
	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range in0 {
		in0[i], in1[i] = int32(i), 1
	}
	return &inference.ModelInferRequest{ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		},
		RawInputContents: [][]byte{tensor.Bytes(in0), tensor.Bytes(in1)}}
}

// rpcLoad makes call from c goroutines for d and returns the rate and each call's latency (µs).
func rpcLoad(b *testing.B, call func(context.Context) error, c int, d time.Duration) (float64, []float64) {
	rate, lats, err := callLoop(c, d, func(int) error { return call(context.Background()) })
	if err != nil {
		b.Fatal(err)
	}
	return rate, lats
}
