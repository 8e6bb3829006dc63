package vllmsim

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Fabric stands in for the KV-transfer network (NIXL's side channels and RDMA) between the
// simulated servers of one test: prefill servers leave their finished prefills on it and decode
// servers pull them. It knows every engine on it, so a decode server can tell a transfer a
// prefill server made from one a client made up. Its methods are safe for concurrent use.
type Fabric struct {
	mu        sync.Mutex
	engines   map[string]*engineAddr    // by engine id
	transfers map[transferKey]*transfer // prefills held for a decode
	swept     time.Time
}

// NewFabric is an empty fabric; pass it in the Config of every server of a test.
func NewFabric() *Fabric {
	return &Fabric{engines: map[string]*engineAddr{}, transfers: map[transferKey]*transfer{}}
}

// engineAddr is where an engine's side channel listens: what its prefill answers name as
// remote_host and remote_port.
type engineAddr struct {
	host string
	port int
}

type transferKey struct{ engine, request string }

// transfer is a finished prefill's KV, held by its prefill engine until a decode engine pulls it.
type transfer struct {
	tokens   []int64 // the prompt the KV is of
	blockIDs []int
	expires  time.Time
}

// join registers an engine; engine ids must be unique on a fabric, as NIXL's are, since a decode
// server finds its source by the id.
func (f *Fabric) join(engine, host string, port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.engines[engine]; ok {
		panic(fmt.Sprintf("vllmsim: engine id %q is already on this Fabric", engine))
	}
	f.engines[engine] = &engineAddr{host: host, port: port}
}

// move records an engine's new address (Start learns its port after New joined).
func (f *Fabric) move(engine, host string, port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.engines[engine] = &engineAddr{host: host, port: port}
}

// put holds a prefill's transfer until ttl passes.
func (f *Fabric) put(engine, request string, t *transfer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked(time.Now())
	f.transfers[transferKey{engine, request}] = t
}

// known reports whether a KV source is on the fabric: an engine (the one named, when engine is
// not nil) at the host and port given (each checked only when not nil).
func (f *Fabric) known(engine, host *string, port *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := func(a *engineAddr) bool { return (host == nil || *host == a.host) && (port == nil || *port == a.port) }
	if engine != nil {
		a, ok := f.engines[*engine]
		return ok && at(a)
	}
	for _, a := range f.engines {
		if at(a) {
			return true
		}
	}
	return false
}

// pull takes a held transfer off the fabric: a pull also tells the prefill engine it may free
// the blocks, so it happens once. It fails when the transfer is not held (never made, pulled
// already, or expired) or blockIDs are not its blocks.
func (f *Fabric) pull(engine, request string, blockIDs []int) (*transfer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.sweepLocked(now)
	k := transferKey{engine, request}
	t, ok := f.transfers[k]
	switch {
	case !ok || now.After(t.expires):
		return nil, fmt.Errorf("engine %s holds no KV transfer for request %s (never made, pulled already, or expired)", engine, request)
	case !slices.Equal(t.blockIDs, blockIDs):
		return nil, fmt.Errorf("remote_block_ids %v are not the blocks of request %s on engine %s", blockIDs, request, engine)
	}
	delete(f.transfers, k)
	return t, nil
}

// Held is the number of transfers waiting for a decode server to pull them: after a test's
// disaggregated requests completed it is 0 unless some decode leg never pulled its transfer.
func (f *Fabric) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now, n := time.Now(), 0
	for _, t := range f.transfers {
		if !now.After(t.expires) {
			n++
		}
	}
	return n
}

// sweepLocked frees expired transfers, at most once a second: often enough to bound what a
// benchmark that never pulls leaves behind, rarely enough to cost nothing per request.
func (f *Fabric) sweepLocked(now time.Time) {
	if now.Sub(f.swept) < time.Second {
		return
	}
	f.swept = now
	for k, t := range f.transfers {
		if now.After(t.expires) {
			delete(f.transfers, k)
		}
	}
}
