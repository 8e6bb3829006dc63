package respcache_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 64 clients asking the same question at once: the first asks upstream, the others wait for its
// answer (they would otherwise all miss), and every one gets the whole answer.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	hold := make(chan struct{})
	up.set(func(u *upstreamFake) { u.hold = hold })
	g := startGateway(t, up, respcache.Options{})
	const clients = 64
	var wg sync.WaitGroup
	answers := make([]answer, clients)
	for i := range clients {
		wg.Go(func() {
			body := chatReq("the same question")
			if i%2 == 1 {
				body = chatReq("the same question", `"stream":true`)
			}
			answers[i] = g.chat(t, body)
		})
	}
	// The first asks upstream, which holds its answer until the others wait for it (or, if
	// they never do, for a while: then the check below fails).
	deadline := time.Now().Add(10 * time.Second)
	for g.cache.Waiting() < clients-1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, http.StatusOK, a.status, a.body)
		require.NoError(t, a.err)
		if i%2 == 1 {
			text, _, done := streamed(t, a.body)
			assert.Equal(t, "Answer to: the same question", text, "client %d", i)
			assert.True(t, done)
		} else {
			assert.Equal(t, "Answer to: the same question", decode(t, a.body).content(), "client %d", i)
		}
	}
	assert.EqualValues(t, 1, up.calls.Load(), "one upstream call")
}
