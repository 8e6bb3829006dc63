package upstream_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// member is an endpoint of a protocol that only counts its checks.
type member struct {
	st     upstream.State
	cfg    upstream.Resolved
	ctx    context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	checks int
}

type setEnv struct {
	set       *upstream.Set[*member]
	mu        sync.Mutex
	published [][]string
	gauges    map[string]bool
}

func newSetEnv() *setEnv {
	e := &setEnv{gauges: map[string]bool{}}
	e.set = upstream.NewSet(upstream.SetHooks[*member]{
		State:             func(m *member) *upstream.State { return &m.st },
		Config:            func(m *member) *upstream.Resolved { return &m.cfg },
		Context:           func(m *member) context.Context { return m.ctx },
		DiscoveryInterval: time.Hour,
		Check: func(ctx context.Context, m *member, due bool) bool {
			m.mu.Lock()
			m.checks++
			m.mu.Unlock()
			return !m.st.SetHealthy(true) // publish on recovery
		},
		Publish: func(ms []*member) {
			var names []string
			for _, m := range ms {
				names = append(names, m.cfg.Name)
			}
			e.mu.Lock()
			e.published = append(e.published, names)
			e.mu.Unlock()
		},
		Gauge: func(m *member, healthy bool) {
			e.mu.Lock()
			e.gauges[m.cfg.Name] = healthy
			e.mu.Unlock()
		},
	})
	return e
}

func (e *setEnv) member(name string) *member {
	m := &member{cfg: upstream.Resolved{Endpoint: upstream.Endpoint{Name: name, CheckInterval: time.Hour}}}
	m.st.Init(&m.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.ctx, m.stop = context.WithCancel(e.set.Context())
	return m
}

func (e *setEnv) publishes() [][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][]string(nil), e.published...)
}

// A Set checks its configured endpoints once at Start and publishes them in one go, checks an
// endpoint added later at once, refuses a second endpoint of one name, forgets a removed one,
// mirrors health into the gauge, and refuses endpoints after Close.
func TestSet(t *testing.T) {
	e := newSetEnv()
	a, b := e.member("a"), e.member("b")
	require.NoError(t, e.set.Add(a, nil))
	require.NoError(t, e.set.Add(b, nil))
	assert.Empty(t, e.publishes(), "nothing is checked before Start")

	e.set.Start(context.Background())
	assert.Equal(t, [][]string{{"a", "b"}}, e.publishes(), "one publish for every endpoint that passed its first check")
	assert.True(t, a.st.Healthy())

	c := e.member("c")
	refused := e.member("c")
	var admitted bool
	require.NoError(t, e.set.Add(c, func() error { admitted = true; return nil }))
	assert.True(t, admitted)
	var fe *upstream.FieldError
	require.ErrorAs(t, e.set.Add(refused, nil), &fe)
	assert.Equal(t, "name", fe.Field)
	require.Eventually(t, func() bool { return len(e.publishes()) == 2 }, 5*time.Second, time.Millisecond, "an added endpoint is checked at once")
	assert.Equal(t, []string{"c"}, e.publishes()[1])

	var gone *member
	assert.True(t, e.set.Remove("b", func(m *member) { gone = m; m.stop() }))
	assert.Same(t, b, gone)
	assert.False(t, e.set.Remove("b", func(*member) { t.Fatal("removed twice") }))
	assert.Equal(t, []*member{a, c}, e.set.All())

	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.gauges["a"] && e.gauges["c"]
	}, 5*time.Second, time.Millisecond, "health reaches the gauge")

	e.set.Close()
	assert.True(t, e.set.Closed())
	assert.Error(t, e.set.Add(e.member("d"), nil))
	assert.Error(t, e.set.Context().Err(), "endpoints' contexts end with the set")
}
