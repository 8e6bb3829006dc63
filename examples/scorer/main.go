// Command scorer serves a model defined in proto: proto/scorer/v1/scorer.proto declares the
// tensors and the model, `buf generate` (see buf.gen.yaml) writes gen/, and this file is all the
// Go there is: one method, registered with the gateway.
//
//	go run ./examples/scorer -addr :8000
//
// serves KServe model "scorer" over gRPC, Connect and REST (ModelInfer, ModelMetadata,
// ModelConfig, ...) and the typed scorer.v1.ScorerService on the same port.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/engines"
	scorerv1 "github.com/infergate/infergate/examples/scorer/gen/scorer/v1"
	"github.com/infergate/infergate/examples/scorer/gen/scorer/v1/scorerv1infergate"
	"github.com/infergate/infergate/surface/gateway"
	"google.golang.org/grpc"

	"net/http"
)

// features is the row width declared in scorer.proto (shape [-1, 32]).
const features = 32

// scorer scores each row of features with a linear model.
type scorer struct {
	weights [features]float32
	bias    float32
}

// newScorer returns the example's model: the mean of the row's features.
func newScorer() *scorer {
	s := &scorer{}
	for i := range s.weights {
		s.weights[i] = 1.0 / features
	}
	return s
}

// Score is the handler: the gateway has already checked that features is [batch, 32] FP32, and
// req.Features views the request's bytes without a copy.
func (s *scorer) Score(_ context.Context, req *scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
	rows := len(req.Features) / features
	score := make([]float32, rows)
	for r := range rows {
		sum := s.bias
		for i, x := range req.Features[r*features : (r+1)*features] {
			sum += x * s.weights[i]
		}
		score[r] = sum
	}
	return &scorerv1.ScoreResponse{Score: score}, nil
}

// newGateway serves impl as KServe model "scorer" and as scorer.v1.ScorerService.
func newGateway(impl scorerv1infergate.ScorerServiceModel, logger *slog.Logger) (*gateway.Gateway, error) {
	reg := engines.NewRegistry()
	if err := scorerv1infergate.RegisterScorerService(reg, impl); err != nil {
		return nil, err
	}
	return gateway.New(reg, gateway.Config{
		Logger:   logger,
		Services: []func(*http.ServeMux, grpc.ServiceRegistrar){scorerv1infergate.MountScorerService(impl)},
	}), nil
}

func main() {
	addr := flag.String("addr", ":8000", "listen address")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	gw, err := newGateway(newScorer(), logger)
	if err != nil {
		logger.Error("register", "err", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Error("listen", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.Shutdown(shutdown)
	}()
	if err := gw.Serve(ln); err != nil && err != http.ErrServerClosed {
		logger.Error("serve", "err", err)
		os.Exit(1)
	}
}
