package kserveproxy

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// model is one public model name in the registry and the endpoints that serve it.
type model struct {
	p      *Proxy
	public string
	raw    []byte // the registered config, serialized (named public)
	entry  *engines.Entry
	cfg    *inference.ModelConfig // the registered config
	// decoupled models go through ModelStreamInfer; controls are the sequence control inputs the
	// gateway's sequencer adds, which the upstream's own sequence batcher adds again.
	decoupled bool
	controls  map[string]bool
	outIndex  map[string]int
	seq       *sticky // nil unless the model batches sequences
	routes    atomic.Pointer[[]*route]
}

// route is one (public model, endpoint) pair, with its metric children resolved once.
type route struct {
	ep       *endpoint
	upstream string // the name the endpoint knows the model by (differs for aliases)
	inflight prometheus.Gauge
	latency  prometheus.Observer
	ok       prometheus.Counter
}

// State is the route's endpoint's, for routing.
func (r *route) State() *upstream.State { return &r.ep.State }

// candidate is an endpoint's model offered under a public name.
type candidate struct {
	ep       *endpoint
	upstream string
	um       *upstreamModel
}

func (c candidate) State() *upstream.State { return &c.ep.State }

// rebuildLocked reconciles the registry with every endpoint's last discovered models: a public
// name gets one model whose config is that of the highest-priority endpoint serving it (a healthy
// one if any), routed to every endpoint whose config has the same tensors and batching. A changed
// config re-registers the model; a name no endpoint serves any more leaves the registry. The
// endpoints in up count as healthy already: they are marked so once their routes exist.
func (p *Proxy) rebuildLocked(up ...*endpoint) {
	if p.closed {
		return
	}
	// Each name's candidates are sorted by priority; equal priorities keep configuration order.
	t := upstream.BuildTable(p.endpoints(),
		func(e *endpoint) (map[string]*upstreamModel, map[string]string) {
			if mp := e.models.Load(); mp != nil {
				return *mp, e.cfg.Aliases
			}
			return nil, nil
		},
		func(e *endpoint, _, served string, um *upstreamModel) candidate { return candidate{e, served, um} })
	cands := t.Routes
	for _, public := range t.Names { // registration order is listing order: keep it stable
		cs := cands[public]
		chosen := cs[0]
		for _, c := range cs {
			if c.ep.Healthy() || slices.Contains(up, c.ep) {
				chosen = c
				break
			}
		}
		raw := chosen.um.raw
		if public != chosen.upstream {
			cfg := chosen.um.cfg
			renamed := proto.Clone(cfg).(*inference.ModelConfig)
			renamed.Name = public
			b, err := deterministic.Marshal(renamed)
			if err != nil {
				p.log.Warn("cannot serve model", "model", public, "err", err)
				continue
			}
			raw = b
		}
		var routes []*route
		for _, c := range cs {
			if !bytes.Equal(c.um.iface, chosen.um.iface) {
				p.log.Warn("endpoint's config of the model differs in tensors or batching from the one served; not routing the model to it",
					"model", public, "endpoint", c.ep.cfg.Name, "config_from", chosen.ep.cfg.Name)
				continue
			}
			routes = append(routes, &route{ep: c.ep, upstream: c.upstream,
				inflight: p.m.inflight.WithLabelValues(public, c.ep.cfg.Name),
				latency:  p.m.latency.WithLabelValues(public, c.ep.cfg.Name),
				ok:       p.m.requests.WithLabelValues(public, c.ep.cfg.Name, "ok")})
		}
		m := p.models[public]
		held := p.reg.Lookup(public)
		if m != nil && held != m.entry {
			delete(p.models, public) // someone else took the name over
			m = nil
		}
		if m != nil && bytes.Equal(m.raw, raw) {
			m.routes.Store(&routes)
			continue
		}
		if m == nil && held != nil {
			if !p.skipped[public] {
				p.log.Warn("upstream model not served: the name is taken by another model (an alias can rename it)", "model", public)
				p.skipped[public] = true
			}
			continue
		}
		if m != nil {
			p.log.Info("upstream model config changed; registering it again", "model", public)
			p.unregister(public, m)
		}
		nm, err := p.register(public, raw)
		if err != nil {
			p.log.Warn("cannot serve model", "model", public, "err", err)
			continue
		}
		nm.routes.Store(&routes)
		delete(p.skipped, public)
	}
	for public, m := range p.models {
		if _, ok := cands[public]; !ok {
			p.log.Info("no endpoint serves the model any more; removing it", "model", public)
			p.unregister(public, m)
		}
	}
	for public := range p.skipped {
		if _, ok := cands[public]; !ok {
			delete(p.skipped, public)
		}
	}
}

// register builds the model for a serialized config and adds it to the registry.
func (p *Proxy) register(public string, raw []byte) (*model, error) {
	m := &model{p: p, public: public, raw: raw}
	rm, err := engines.NewRemoteModel(&tensorv1.TensorModelConfig{Name: public, TritonModelConfig: raw}, m.execute)
	if err != nil {
		return nil, err
	}
	cfg := rm.Config()
	m.cfg = cfg
	m.decoupled = cfg.GetModelTransactionPolicy().GetDecoupled()
	m.outIndex = make(map[string]int, len(cfg.GetOutput()))
	for i, o := range cfg.GetOutput() {
		m.outIndex[o.GetName()] = i
	}
	if sb := cfg.GetSequenceBatching(); sb != nil {
		m.controls = map[string]bool{}
		for _, ci := range sb.GetControlInput() {
			m.controls[ci.GetName()] = true
		}
		idle := time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond
		if idle <= 0 {
			idle = time.Second // Triton's default
		}
		m.seq = &sticky{idle: idle, eps: map[engines.CorrelationID]stickyEntry{}}
	}
	entry, err := p.reg.Register(rm)
	if err != nil {
		return nil, err
	}
	m.entry = entry
	p.models[public] = m
	return m, nil
}

// unregister takes m out of the registry, unless the name now belongs to another model.
func (p *Proxy) unregister(public string, m *model) {
	if p.reg.Lookup(public) == m.entry {
		p.reg.Remove(public)
	}
	delete(p.models, public)
}

// sticky remembers which endpoint holds each live sequence of a sequence model: the upstream
// keeps the sequence's state, so every request of a sequence must reach the endpoint its START
// went to.
type sticky struct {
	idle time.Duration
	mu   sync.Mutex
	eps  map[engines.CorrelationID]stickyEntry
	sets int
}

type stickyEntry struct {
	ep   *endpoint
	last time.Time
}

func (s *sticky) get(id engines.CorrelationID) *endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	en, ok := s.eps[id]
	if !ok {
		return nil
	}
	en.last = time.Now()
	s.eps[id] = en
	return en.ep
}

func (s *sticky) set(id engines.CorrelationID, ep *endpoint) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eps[id] = stickyEntry{ep, now}
	s.sets++
	if s.sets%256 == 0 {
		// Sequences abandoned without an END request: the gateway's sequencer has forgotten
		// them after the idle timeout, so can this.
		for k, v := range s.eps {
			if now.Sub(v.last) > 2*s.idle {
				delete(s.eps, k)
			}
		}
	}
}

func (s *sticky) del(id engines.CorrelationID) {
	s.mu.Lock()
	delete(s.eps, id)
	s.mu.Unlock()
}
