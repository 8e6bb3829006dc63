package kserve_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// REST benchmarks run infergate's REST endpoint (BenchmarkX/infergate) against the same request
// over gRPC ModelInfer to the same gateway from a grpc-go client (BenchmarkX/baseline), as sibling
// sub-benchmarks in one process, so the ratio is read straight from the output. Both measure
// round trips from one client at a time; both report the tensor bytes they carry per request as
// MB/s. Goal: REST binary >= 0.7x gRPC bytes/s on the 16 MiB identity.

// benchServer starts a gateway and connects both kinds of client to it.
func benchServer(b *testing.B) (*gatewaytest.Server, *http.Client, *grpc.ClientConn) {
	b.Helper()
	srv := gatewaytest.Start(b, gateway.Config{})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	b.Cleanup(hc.CloseIdleConnections)
	return srv, hc, conn
}

// restRoundTrip posts body and reads the whole answer into buf (grown as needed), failing on
// anything but 200.
func restRoundTrip(b *testing.B, hc *http.Client, url string, body []byte, buf *bytes.Buffer, header ...string) http.Header {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	buf.Reset()
	if res.ContentLength > 0 {
		buf.Grow(int(res.ContentLength))
	}
	if _, err := buf.ReadFrom(res.Body); err != nil {
		b.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b.Fatalf("HTTP %d: %s", res.StatusCode, buf.Bytes()[:min(buf.Len(), 300)])
	}
	return res.Header
}

func reportRate(b *testing.B, durs []time.Duration) {
	slices.Sort(durs)
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e3, "p50-us")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkRESTInferSimple is Triton's simple request (two INT32 [1,16]) as REST JSON over
// HTTP/1.1 keep-alive, against the same request over gRPC ModelInfer.
func BenchmarkRESTInferSimple(b *testing.B) {
	srv, hc, conn := benchServer(b)
	const tensorBytes = 4 * 16 * 4 // two inputs and two outputs of 16 INT32
	b.Run("infergate", func(b *testing.B) {
		url := srv.URL + "/v2/models/simple/infer"
		body := []byte(simpleJSON)
		var buf bytes.Buffer
		restRoundTrip(b, hc, url, body, &buf)
		var res struct {
			Outputs []struct {
				Data []int32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(buf.Bytes(), &res); err != nil || len(res.Outputs) != 2 || res.Outputs[0].Data[15] != 16 || res.Outputs[1].Data[0] != -1 {
			b.Fatalf("bad simple answer %s (%v)", buf.Bytes(), err)
		}
		durs := make([]time.Duration, 0, b.N)
		b.SetBytes(tensorBytes)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			restRoundTrip(b, hc, url, body, &buf)
			durs = append(durs, time.Since(t0))
		}
		b.StopTimer()
		reportRate(b, durs)
	})
	b.Run("baseline", func(b *testing.B) {
		ctx := context.Background()
		req := simpleRequest("req-1")
		resp := new(inference.ModelInferResponse)
		if err := conn.Invoke(ctx, servicePath+"ModelInfer", req, resp); err != nil {
			b.Fatal(err)
		}
		if o := int32s(resp.RawOutputContents[0]); o[15] != 16 {
			b.Fatalf("bad simple answer %v", o)
		}
		durs := make([]time.Duration, 0, b.N)
		b.SetBytes(tensorBytes)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if err := conn.Invoke(ctx, servicePath+"ModelInfer", req, new(inference.ModelInferResponse)); err != nil {
				b.Fatal(err)
			}
			durs = append(durs, time.Since(t0))
		}
		b.StopTimer()
		reportRate(b, durs)
	})
}

const (
	identityElems = 4 << 20 // FP32 elements: 16 MiB
	identityBytes = 4 * identityElems
)

// BenchmarkRESTInferIdentity16MiB sends a 16 MiB FP32 tensor through identity_fp32 and back:
// REST with binary tensor data in and out, against gRPC ModelInfer. Neither client re-encodes
// per call (the REST body is built once; the gRPC request is sent pre-encoded and its response
// only measured), so the figures are the server's and the transports'. SetBytes counts the tensor
// once per direction.
func BenchmarkRESTInferIdentity16MiB(b *testing.B) {
	srv, hc, conn := benchServer(b)
	data := make([]byte, identityBytes)
	for i := range identityElems {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	b.Run("infergate", func(b *testing.B) {
		url := srv.URL + "/v2/models/identity_fp32/infer"
		header := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","shape":[%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`, identityElems, identityBytes)
		body := append([]byte(header), data...)
		hl := strconv.Itoa(len(header))
		var buf bytes.Buffer
		h := restRoundTrip(b, hc, url, body, &buf, kserveHeader, hl)
		n, err := strconv.Atoi(h.Get(kserveHeader))
		if err != nil || buf.Len()-n != identityBytes || !bytes.Equal(buf.Bytes()[n:], data) {
			b.Fatalf("identity_fp32 over REST: %d bytes after a %d-byte header (%v), want the %d sent", buf.Len()-n, n, err, identityBytes)
		}
		b.SetBytes(2 * identityBytes)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			restRoundTrip(b, hc, url, body, &buf, kserveHeader, hl)
			if buf.Len() < identityBytes {
				b.Fatalf("%d response bytes", buf.Len())
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	})
	b.Run("baseline", func(b *testing.B) {
		ctx := context.Background()
		req := &inference.ModelInferRequest{
			ModelName:        "identity_fp32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{identityElems})},
			RawInputContents: [][]byte{data},
		}
		resp := new(inference.ModelInferResponse)
		if err := conn.Invoke(ctx, servicePath+"ModelInfer", req, resp); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(resp.RawOutputContents[0], data) {
			b.Fatal("identity_fp32 over gRPC: output differs")
		}
		wire, err := proto.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		opts := []grpc.CallOption{grpc.ForceCodecV2(benchRawCodec{})}
		var got benchRawResponse
		b.SetBytes(2 * identityBytes)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := conn.Invoke(ctx, servicePath+"ModelInfer", benchRawRequest(wire), &got, opts...); err != nil {
				b.Fatal(err)
			}
			if got.n < identityBytes {
				b.Fatalf("%d response bytes", got.n)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	})
}

// benchRawRequest is an already encoded message; benchRawResponse records only an answer's size.
type (
	benchRawRequest  []byte
	benchRawResponse struct{ n int }
)

// benchRawCodec sends benchRawRequest as is and reads only the size of a reply, so the gRPC client
// neither marshals nor unmarshals 16 MiB per call. Its name is "proto", for the wire content type.
type benchRawCodec struct{}

func (benchRawCodec) Name() string { return "proto" }

func (benchRawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(benchRawRequest))}, nil
}

func (benchRawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*benchRawResponse).n = data.Len()
	return nil
}
