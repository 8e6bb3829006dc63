package registry

import (
	"time"

	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/upstream"
)

// KServePool is the pool of KServe upstreams registered tensor backends join: *kserveproxy.Proxy.
type KServePool interface {
	// Add adds an endpoint serving exactly the models configs describe, without discovery.
	Add(ep upstream.Endpoint, configs ...*tensorv1.TensorModelConfig) error
	Remove(name string) bool
}

// KServeTensors implements TensorBackends on a KServePool: each lease becomes a kserve endpoint
// named EndpointName(lease), with the lease's URL and priority, serving exactly its model with
// the config it registered. The pool health-checks it (gRPC ServerReady), serves the model once a
// check passed, and balances and fails over between the leases serving one model like between
// any of its endpoints; the end of a lease removes its endpoint, and the model with it when no
// other endpoint serves that name. Leases offering one name with different configs follow the
// pool's rule: the highest-priority one's config is served, and leases whose tensors differ from
// it are not routed to while it lasts. Add fails for a name the gateway serves otherwise (a
// built-in, AlreadyExists) and for a config the pool cannot serve.
type KServeTensors struct {
	Pool KServePool
	// CheckInterval and CheckTimeout are the endpoints' health checks; zero means openai's
	// defaults (5 s, 2 s).
	CheckInterval, CheckTimeout time.Duration
}

// Add implements TensorBackends.
func (k KServeTensors) Add(b TensorBackend) error {
	return k.Pool.Add(upstream.Endpoint{Name: EndpointName(b.LeaseID), URL: b.URL, Type: upstream.TypeKServe, Priority: b.Priority,
		CheckInterval: k.CheckInterval, CheckTimeout: k.CheckTimeout}, b.Config)
}

// Remove implements TensorBackends.
func (k KServeTensors) Remove(leaseID string) { k.Pool.Remove(EndpointName(leaseID)) }
