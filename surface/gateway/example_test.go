package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/gateway"
)

// A gateway serves the models of one engines.Registry on one listener: KServe v2 over native
// gRPC, gRPC-Web, Connect and REST, plus health and /metrics. This one serves the built-in
// models (Triton's examples) on a loopback port, answers a REST health check and a Connect
// ModelInfer on "simple", and drains.
func Example() {
	reg := engines.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		panic(err)
	}
	gw := gateway.New(reg, gateway.Config{Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0") // ":8000" in a real server
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	httpClient := &http.Client{Timeout: 10 * time.Second}

	// REST: KServe v2's health endpoint.
	res, err := httpClient.Get(url + "/v2/health/ready")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, string(body))

	// Connect (over HTTP/1.1 here; gRPC clients dial the same port): the generated client.
	client := inferenceconnect.NewGRPCInferenceServiceClient(httpClient, url)
	a, b := make([]int32, 16), make([]int32, 16)
	for i := range a {
		a[i], b[i] = int32(i), 10
	}
	out, err := client.ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		},
		RawInputContents: [][]byte{tensor.Bytes(a), tensor.Bytes(b)},
	})
	if err != nil {
		panic(err) // a *connect.Error with Triton's message and code
	}
	for i, o := range out.GetOutputs() {
		fmt.Println(o.GetName(), o.GetDatatype(), o.GetShape(), tensor.View[int32](out.GetRawOutputContents()[i]))
	}

	// Shutdown turns readiness off, refuses new connections and waits for in-flight requests.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gw.Shutdown(ctx); err != nil {
		panic(err)
	}
	fmt.Println("served until:", errors.Is(<-served, http.ErrServerClosed))
	// Output:
	// 200 {"ready":true}
	// OUTPUT0 INT32 [1 16] [10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25]
	// OUTPUT1 INT32 [1 16] [-10 -9 -8 -7 -6 -5 -4 -3 -2 -1 0 1 2 3 4 5]
	// served until: true
}
