package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/infergate/infergate/lib/openaiwire"
)

// RemoteOptions configure a Remote embedder.
type RemoteOptions struct {
	// Model is the embeddings model's name, sent as "model".
	Model string
	// Post sends one OpenAI /v1/embeddings request body through the
	// gateway's own chain for Model and returns the response body; a non-2xx
	// answer must come back as an error. It should bound what it reads;
	// Remote rejects bodies over its own bound before parsing them anyway.
	Post func(ctx context.Context, body []byte) ([]byte, error)
	// MaxBatch is the most texts one request carries. Default 64.
	MaxBatch int
	// MaxWait is how long a batch stays open for more callers after its
	// first one arrives. Default 2ms: small next to an embeddings call, long
	// enough to gather a burst of concurrent cache lookups.
	MaxWait time.Duration
	// MaxDim bounds the vectors' length (and with MaxBatch, the response
	// size accepted). Default 8192, above every common embeddings model.
	MaxDim int
	// Timeout bounds one request. A batch's request outlives any one
	// caller (callers may leave), so it needs its own limit. Default 30s.
	Timeout time.Duration
}

// Remote embeds texts with an OpenAI-compatible embeddings model. Concurrent
// Embed calls share requests: texts of callers that arrive while a batch is
// open (up to MaxBatch texts or MaxWait) go out in one "input" array, and
// each caller gets its own vectors back (matched by data[i].index). A failed
// request fails every caller in its batch. A caller whose ctx ends returns
// at once without disturbing the others; a request whose callers have all
// left is cancelled.
type Remote struct {
	o RemoteOptions

	mu  sync.Mutex
	cur *batch // the batch still accepting texts, nil if none
}

// batch is one request being formed or in flight.
type batch struct {
	texts   []string
	first   context.Context // values (not cancellation) for the request
	waiters int             // callers still waiting for the result
	timer   *time.Timer
	cancel  context.CancelFunc // set once sent
	done    chan struct{}      // closed when vecs or err is set
	vecs    [][]float32
	err     error
}

// NewRemote returns a Remote embedder.
func NewRemote(o RemoteOptions) *Remote {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 2 * time.Millisecond
	}
	if o.MaxDim <= 0 {
		o.MaxDim = 8192
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return &Remote{o: o}
}

// Name identifies the vector space, for cache keys: "remote/<model>".
func (r *Remote) Name() string { return "remote/" + r.o.Model }

// EmbeddingsModel names the model, which the operator chose: the response cache decides a
// semantic hit with it by the similarity alone, where with the lexical embedder it also needs
// the same words (respcache.ModelEmbedder).
func (r *Remote) EmbeddingsModel() string { return r.o.Model }

// part is one caller's share of a batch.
type part struct {
	b   *batch
	off int
	n   int
}

// Embed returns one L2-normalised vector per text.
func (r *Remote) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if r.o.Post == nil {
		return nil, errors.New("remote embed: no Post function configured")
	}
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote embed: %w", err)
	}
	// Join batches for all chunks first, so that a long list does not wait
	// for one request before queueing the next.
	parts := make([]part, 0, (len(texts)+r.o.MaxBatch-1)/r.o.MaxBatch)
	for i := 0; i < len(texts); i += r.o.MaxBatch {
		chunk := texts[i:min(i+r.o.MaxBatch, len(texts))]
		b, off := r.join(ctx, chunk)
		parts = append(parts, part{b, off, len(chunk)})
	}
	out := make([][]float32, 0, len(texts))
	for i, p := range parts {
		select {
		case <-p.b.done:
			if p.b.err != nil {
				r.leaveAll(parts[i+1:])
				return nil, p.b.err
			}
			out = append(out, p.b.vecs[p.off:p.off+p.n]...)
		case <-ctx.Done():
			r.leaveAll(parts[i:])
			return nil, fmt.Errorf("remote embed: %w", ctx.Err())
		}
	}
	return out, nil
}

// join adds texts (at most MaxBatch) to the open batch, or opens one, and
// returns the batch and the texts' offset in it.
func (r *Remote) join(ctx context.Context, texts []string) (*batch, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.cur
	if b != nil && len(b.texts)+len(texts) > r.o.MaxBatch {
		r.sendLocked(b)
		b = nil
	}
	if b == nil {
		b = &batch{first: ctx, done: make(chan struct{})}
		r.cur = b
		b.timer = time.AfterFunc(r.o.MaxWait, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.cur == b {
				r.sendLocked(b)
			}
		})
	}
	off := len(b.texts)
	b.texts = append(b.texts, texts...)
	b.waiters++
	if len(b.texts) >= r.o.MaxBatch {
		r.sendLocked(b)
	}
	return b, off
}

// sendLocked closes batch b to new texts and starts its request.
func (r *Remote) sendLocked(b *batch) {
	if r.cur == b {
		r.cur = nil
	}
	b.timer.Stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.first), r.o.Timeout)
	b.cancel = cancel
	b.first = nil
	go r.send(ctx, b)
}

// leaveAll drops the caller's interest in its remaining parts.
func (r *Remote) leaveAll(parts []part) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		p.b.waiters--
		if p.b.waiters > 0 {
			continue
		}
		if p.b.cancel != nil {
			p.b.cancel() // in flight and nobody waits: stop the request
		} else if r.cur == p.b {
			r.cur = nil // still forming and nobody waits: never send it
			p.b.timer.Stop()
		}
	}
}

func (r *Remote) send(ctx context.Context, b *batch) {
	defer b.cancel()
	vecs, err := r.request(ctx, b.texts)
	if err != nil {
		err = fmt.Errorf("remote embed (model %q, %d texts): %w", r.o.Model, len(b.texts), err)
	}
	b.vecs, b.err = vecs, err
	close(b.done)
}

func (r *Remote) request(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(openaiwire.EmbeddingsRequest{Model: r.o.Model, Input: texts, EncodingFormat: "float"})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	resp, err := r.o.Post(ctx, body)
	if err != nil {
		return nil, err
	}
	return parseEmbeddings(resp, len(texts), r.o.MaxDim)
}

// maxResponseBytes bounds the body parseEmbeddings accepts for n vectors of
// at most maxDim: 32 bytes per number covers the longest JSON float32
// ("-1.2345678e-38," is 15) with room for spacing, plus 4 KiB of envelope
// (usage, model name, object fields) and 256 bytes per item.
func maxResponseBytes(n, maxDim int) int { return 4096 + n*(256+32*maxDim) }

// parseEmbeddings decodes an OpenAI embeddings response that must hold
// exactly n vectors (indexes 0..n-1, any order), all of one length in
// [1, maxDim], finite and non-zero, and returns them L2-normalised in index
// order, in one backing array.
func parseEmbeddings(body []byte, n, maxDim int) ([][]float32, error) {
	if len(body) > maxResponseBytes(n, maxDim) {
		return nil, fmt.Errorf("response of %d bytes exceeds %d for %d vectors", len(body), maxResponseBytes(n, maxDim), n)
	}
	var resp openaiwire.Embeddings
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	if resp.Error != nil {
		msg := resp.Error.Message
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return nil, fmt.Errorf("embeddings error: %q", msg)
	}
	if len(resp.Data) != n {
		return nil, fmt.Errorf("response has %d vectors, want %d", len(resp.Data), n)
	}
	dim := len(resp.Data[0].Embedding)
	if dim < 1 || dim > maxDim {
		return nil, fmt.Errorf("vector length %d outside [1, %d]", dim, maxDim)
	}
	buf := make([]float32, n*dim)
	out := make([][]float32, n)
	for _, d := range resp.Data {
		if d.Index == nil || *d.Index < 0 || *d.Index >= n {
			return nil, errors.New("vector with a missing or out-of-range index")
		}
		i := *d.Index
		if out[i] != nil {
			return nil, fmt.Errorf("two vectors for index %d", i)
		}
		if len(d.Embedding) != dim {
			return nil, fmt.Errorf("vector %d has length %d, others %d", i, len(d.Embedding), dim)
		}
		var s float64
		for _, f := range d.Embedding {
			s += float64(f) * float64(f)
		}
		if s == 0 || math.IsInf(s, 0) || math.IsNaN(s) {
			return nil, fmt.Errorf("vector %d is zero or not finite", i)
		}
		k := 1 / math.Sqrt(s)
		v := buf[i*dim : (i+1)*dim : (i+1)*dim]
		for j, f := range d.Embedding {
			v[j] = float32(float64(f) * k)
		}
		out[i] = v
	}
	return out, nil
}
