package responses

import (
	"sync"
	"time"
)

// chatOnlyTTL is how long an endpoint found without /v1/responses is translated for before it
// is asked again (an upgraded vLLM gains the route).
const chatOnlyTTL = 10 * time.Minute

// chatOnly remembers the endpoints that answered /v1/responses with a bare 404.
type chatOnly struct {
	now func() time.Time
	mu  sync.RWMutex
	at  map[string]time.Time // endpoint -> when it answered so
}

func newChatOnly(now func() time.Time) *chatOnly {
	return &chatOnly{now: now, at: map[string]time.Time{}}
}

func (c *chatOnly) add(endpoint string) {
	c.mu.Lock()
	c.at[endpoint] = c.now()
	c.mu.Unlock()
}

func (c *chatOnly) has(endpoint string) bool {
	c.mu.RLock()
	at, ok := c.at[endpoint]
	c.mu.RUnlock()
	return ok && c.now().Sub(at) < chatOnlyTTL
}
