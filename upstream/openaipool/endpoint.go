package openaipool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/h1client"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/vllmmetrics"
)

// endpoint is one upstream at run time: its pooled transport, health and discovered models.
type endpoint struct {
	upstream.State
	cfg    upstream.Resolved
	client *http.Client    // health checks and discovery
	tr     *http.Transport // health checks and discovery, and proxied requests to https:// upstreams
	rt     roundTripper    // what proxied requests go through: h1client for http:// (when fast), else tr
	log    *slog.Logger
	// warn writes the warnings a failing upstream can cause on every request (a response cut
	// short) at most once per interval, with a count.
	warn *logthrottle.Throttle

	// vllm is a vLLM endpoint's /metrics as its last health check scraped it; nil when unknown
	// (another type, not scraped yet, or the last scrape failed).
	vllm atomic.Pointer[vllmPage]
	// scrapes counts the scrapes by result ("ok", "error"); set by the proxy.
	scrapes func(result string)
	// stats counts the requests the endpoint served.
	stats statsCounter
	// models is the last successful discovery: upstream model id -> its /v1/models entry.
	models atomic.Pointer[map[string]json.RawMessage]
	// urls caches the upstream URL of each API path requests went to (a handful): the transport
	// only reads a request's URL, so one copy serves every request. Copy-on-write under urlMu.
	urls  atomic.Pointer[map[string]*url.URL]
	urlMu sync.Mutex
	ctx   context.Context // ends when the endpoint is removed or the proxy closes
	stop  context.CancelFunc
}

// newEndpoint makes an endpoint; fast sends proxied requests to an http:// upstream through
// h1client (where h1client.Supported), not net/http's Transport.
func newEndpoint(cfg upstream.Resolved, log *slog.Logger, fast bool) *endpoint {
	tr := &http.Transport{
		Proxy: nil, // upstreams are addressed directly; an environment proxy would add a hop
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// Enough idle connections that a burst of concurrent requests reuses them instead of
		// churning through TIME_WAIT; the gateway's own client side is the bound.
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		// The client's Accept-Encoding is forwarded as sent; Go must not add gzip and decode it
		// behind our back, or the bytes would not pass through unchanged.
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
	var rt roundTripper = transport{tr}
	if fast && h1client.Supported && cfg.BaseURL != nil && cfg.BaseURL.Scheme == "http" {
		// It dials as tr dials (tr.DialContext is read at each dial, so tests can count them),
		// and tr carries what it does not (bodies over h1client.MaxBody).
		rt = fastTransport{h1client.New(hostPort(cfg.BaseURL), tr,
			h1client.WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
				return tr.DialContext(ctx, network, addr)
			}))}
	}
	log = log.With("endpoint", cfg.Name)
	e := &endpoint{
		cfg:    cfg,
		tr:     tr,
		rt:     rt,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		log:    log,
		warn:   logthrottle.New(log, logthrottle.DefaultInterval),
	}
	e.Init(&e.cfg, log)
	return e
}

// roundTripper is what proxied requests go through. The context travels beside the request, so
// the proxy does not copy its request per attempt (Request.WithContext) where it need not.
type roundTripper interface {
	roundTrip(ctx context.Context, req *http.Request) (*http.Response, error)
	CloseIdleConnections()
}

// transport sends proxied requests on net/http's Transport.
type transport struct{ *http.Transport }

func (t transport) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	return t.RoundTrip(req.WithContext(ctx))
}

// fastTransport sends proxied requests on h1client.
type fastTransport struct{ *h1client.Transport }

func (t fastTransport) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	return t.RoundTrip(ctx, req)
}

// hostPort is u's host with its scheme's default port when it names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// check runs one health check: any 2xx is healthy.
func (e *endpoint) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.HealthURL.String(), nil)
	if err != nil {
		return err
	}
	e.setHeaders(req.Header)
	res, err := e.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("health check %s: HTTP %d", e.cfg.HealthURL, res.StatusCode)
	}
	return nil
}

// discover lists the endpoint's models and applies the allow-list.
func (e *endpoint) discover(ctx context.Context) (map[string]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.ModelsURL.String(), nil)
	if err != nil {
		return nil, err
	}
	e.setHeaders(req.Header)
	res, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		return nil, fmt.Errorf("model listing %s: HTTP %d", e.cfg.ModelsURL, res.StatusCode)
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 16<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("model listing %s: %w", e.cfg.ModelsURL, err)
	}
	allowed := make(map[string]bool, len(e.cfg.Models))
	for _, m := range e.cfg.Models {
		allowed[m] = true
	}
	out := make(map[string]json.RawMessage, len(list.Data))
	for _, raw := range list.Data {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == "" {
			continue
		}
		if len(allowed) > 0 && !allowed[m.ID] {
			continue
		}
		out[m.ID] = raw
	}
	return out, nil
}

// maxCachedURLs bounds urls; paths come from the gateway's own routes and callers of Call.
const maxCachedURLs = 32

// urlFor is the upstream URL for an API path (without a query). The caller must not modify it.
func (e *endpoint) urlFor(path string) *url.URL {
	m := e.urls.Load()
	if m != nil {
		if u, ok := (*m)[path]; ok {
			return u
		}
	}
	u := *e.cfg.BaseURL
	u.Path = e.cfg.BaseURL.Path + path
	e.urlMu.Lock()
	defer e.urlMu.Unlock()
	if m = e.urls.Load(); m == nil || len(*m) < maxCachedURLs {
		next := make(map[string]*url.URL, 4)
		if m != nil {
			maps.Copy(next, *m)
		}
		next[path] = &u
		e.urls.Store(&next)
	}
	return &u
}

func (e *endpoint) setHeaders(h http.Header) {
	for _, kv := range e.cfg.HeaderList {
		h.Set(kv[0], kv[1])
	}
}

// probe runs one health check and, when healthy and due (or just recovered), a model discovery.
// It reports whether the model set changed.
func (e *endpoint) probe(ctx context.Context, discoverDue bool) (changed bool) {
	if f, ok := e.rt.(fastTransport); ok {
		f.CloseDead()
	}
	was, err := e.Check(ctx, e.check)
	if err != nil {
		return false
	}
	if e.cfg.SkipDiscovery {
		if e.models.Load() == nil {
			models := make(map[string]json.RawMessage, len(e.cfg.Models))
			for _, m := range e.cfg.Models {
				models[m], _ = json.Marshal(modelEntry{ID: m, Object: "model", OwnedBy: e.cfg.Name})
			}
			e.models.Store(&models)
			changed = true
		}
	} else if !was || discoverDue || e.models.Load() == nil {
		models, derr := e.discover(ctx)
		if derr != nil {
			e.log.Warn("model discovery failed; keeping the last known models", "err", derr)
		} else {
			old := e.models.Load()
			changed = old == nil || !sameKeys(*old, models)
			e.models.Store(&models)
		}
	}
	if !was {
		e.log.Info("upstream healthy")
	}
	e.SetHealthy(true)
	if e.cfg.Type == upstream.TypeVLLM {
		e.scrape(ctx)
	}
	return changed
}

// vllmPage is a vLLM endpoint's scraped /metrics page and the load it reports.
type vllmPage struct {
	metrics *vllmmetrics.Metrics
	load    vllmmetrics.Load
}

// scrape reads a healthy vLLM endpoint's /metrics: its load feeds the routing (the queue the
// server reports breaks ties between endpoints as loaded from here) and /olla/vllm/health and
// /metrics. A failure only makes the load unknown: the endpoint stays in rotation.
func (e *endpoint) scrape(ctx context.Context) {
	h := make(http.Header, len(e.cfg.HeaderList))
	e.setHeaders(h)
	m, err := vllmmetrics.Scrape(ctx, e.client, e.urlFor("/metrics").String(), h, vllmmetrics.Limits{Timeout: e.cfg.CheckTimeout})
	if err != nil {
		if e.vllm.Swap(nil) != nil {
			e.log.Info("vLLM metrics unavailable; routing without the server's own queue", "err", err)
		}
		e.SetReportedQueue(0)
		e.count("error")
		return
	}
	pg := &vllmPage{metrics: m, load: m.Load()}
	e.vllm.Store(pg)
	e.SetReportedQueue(int64(pg.load.Running + pg.load.Waiting))
	e.count("ok")
}

func (e *endpoint) count(result string) {
	if e.scrapes != nil {
		e.scrapes(result)
	}
}

func sameKeys(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
