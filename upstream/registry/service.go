package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/gen/infergate/registry/v1/registryv1connect"
	"github.com/infergate/infergate/lib/logthrottle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ServiceOptions configures a Service.
type ServiceOptions struct {
	// DefaultTTL is the lease ttl when a request names none; default 10 s.
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound a requested ttl; default 1 s and 5 min.
	MinTTL, MaxTTL time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// StoreTimeout bounds each store call (Redis): a store that does not answer in time makes the
	// call UNAVAILABLE with a retry hint instead of holding it; default 2 s.
	StoreTimeout time.Duration
}

// Service is infergate.registry.v1.RegistryService over a Store.
type Service struct {
	store Store
	opts  ServiceOptions
	warn  *logthrottle.Throttle // a store that is down fails every call: one line per interval
}

// NewService serves store.
func NewService(store Store, opts ServiceOptions) *Service {
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = 10 * time.Second
	}
	if opts.MinTTL <= 0 {
		opts.MinTTL = time.Second
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = 5 * time.Minute
	}
	opts.MaxTTL = max(opts.MaxTTL, opts.MinTTL)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = 2 * time.Second
	}
	return &Service{store: store, opts: opts, warn: logthrottle.New(opts.Logger, 0)}
}

// Mount serves the service on the gateway's port: the Connect handler on mux (Connect, gRPC-Web)
// and the grpc-go service on grpcSrv (gRPC). Its signature fits gateway.Config.Services.
func (s *Service) Mount(mux *http.ServeMux, grpcSrv grpc.ServiceRegistrar) {
	mux.Handle(registryv1connect.NewRegistryServiceHandler(s))
	registryv1.RegisterRegistryServiceServer(grpcSrv, grpcService{s})
}

// Register implements RegistryService.Register.
func (s *Service) Register(ctx context.Context, req *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	if err := ValidateBackend(req.GetBackend()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	ttl, err := s.ttl(req.GetTtl())
	if err != nil {
		return nil, err
	}
	b := normalize(req.GetBackend())
	var lease Lease
	sctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	if id := req.GetLeaseId(); id != "" {
		lease, err = s.store.Update(sctx, id, b, ttl)
	} else {
		lease, err = s.store.Register(sctx, b, ttl)
	}
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetLeaseId())
	}
	s.opts.Logger.Info("registry: backend registered", "model", b.GetModelName(), "type", typeName(b.GetModelType()),
		"url", b.GetUrl(), "lease", lease.ID, "ttl", lease.TTL, "update", req.GetLeaseId() != "")
	return &registryv1.RegisterResponse{LeaseId: lease.ID, Ttl: durationpb.New(lease.TTL),
		HeartbeatInterval: durationpb.New(heartbeatInterval(lease.TTL))}, nil
}

// Heartbeat implements RegistryService.Heartbeat.
func (s *Service) Heartbeat(ctx context.Context, req *registryv1.HeartbeatRequest) (*registryv1.HeartbeatResponse, error) {
	if req.GetLeaseId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lease_id is required"))
	}
	sctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	lease, err := s.store.Heartbeat(sctx, req.GetLeaseId())
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetLeaseId())
	}
	return &registryv1.HeartbeatResponse{Ttl: durationpb.New(lease.TTL), HeartbeatInterval: durationpb.New(heartbeatInterval(lease.TTL))}, nil
}

// Deregister implements RegistryService.Deregister.
func (s *Service) Deregister(ctx context.Context, req *registryv1.DeregisterRequest) (*registryv1.DeregisterResponse, error) {
	if req.GetLeaseId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lease_id is required"))
	}
	sctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	if err := s.store.Deregister(sctx, req.GetLeaseId()); err != nil {
		return nil, s.storeError(ctx, err, req.GetLeaseId())
	}
	s.opts.Logger.Info("registry: backend deregistered", "lease", req.GetLeaseId())
	return &registryv1.DeregisterResponse{}, nil
}

// ListBackends implements RegistryService.ListBackends.
func (s *Service) ListBackends(ctx context.Context, _ *registryv1.ListBackendsRequest) (*registryv1.ListBackendsResponse, error) {
	sctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	regs, err := s.store.List(sctx)
	if err != nil {
		return nil, s.storeError(ctx, err, "")
	}
	out := &registryv1.ListBackendsResponse{Registrations: make([]*registryv1.Registration, len(regs))}
	for i, r := range regs {
		out.Registrations[i] = &registryv1.Registration{LeaseId: r.ID, Backend: r.Backend,
			Ttl: durationpb.New(r.TTL), ExpireTime: timestamppb.New(r.Expires)}
	}
	return out, nil
}

// ttl applies the default and the bounds to a requested ttl.
func (s *Service) ttl(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return s.opts.DefaultTTL, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl: %v", err))
	}
	ttl := d.AsDuration()
	switch {
	case ttl < 0:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl %v is negative", ttl))
	case ttl == 0:
		return s.opts.DefaultTTL, nil
	}
	return min(max(ttl, s.opts.MinTTL), s.opts.MaxTTL), nil
}

// heartbeatInterval leaves room for two lost heartbeats before the lease expires.
func heartbeatInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// storeError maps a store call's failure for the caller of ctx: its own cancellation or
// deadline as such, anything else (the store down, or slower than StoreTimeout) UNAVAILABLE
// with a retry hint.
func (s *Service) storeError(ctx context.Context, err error, leaseID string) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("lease '%s' is not found (expired, deregistered or never granted); register again", leaseID))
	case errors.Is(ctx.Err(), context.Canceled):
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	s.warn.Warn("store-failed", "registry: store failed; calls refused", "err", err)
	e := connect.NewError(connect.CodeUnavailable, fmt.Errorf("registry store unavailable: %v; retry later", err))
	e.Meta().Set("Retry-After", "1")
	return e
}

// grpcService serves the same methods to grpc-go, whose status errors carry connect's codes and
// messages.
type grpcService struct{ s *Service }

func (g grpcService) Register(ctx context.Context, req *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	res, err := g.s.Register(ctx, req)
	return res, grpcStatus(err)
}

func (g grpcService) Heartbeat(ctx context.Context, req *registryv1.HeartbeatRequest) (*registryv1.HeartbeatResponse, error) {
	res, err := g.s.Heartbeat(ctx, req)
	return res, grpcStatus(err)
}

func (g grpcService) Deregister(ctx context.Context, req *registryv1.DeregisterRequest) (*registryv1.DeregisterResponse, error) {
	res, err := g.s.Deregister(ctx, req)
	return res, grpcStatus(err)
}

func (g grpcService) ListBackends(ctx context.Context, req *registryv1.ListBackendsRequest) (*registryv1.ListBackendsResponse, error) {
	res, err := g.s.ListBackends(ctx, req)
	return res, grpcStatus(err)
}

func grpcStatus(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return status.Error(codes.Internal, err.Error())
}
