package respcache

// For the external tests: wait for the answers being stored in the background.
func (c *Cache) Wait() { c.wait() }

// Waiting counts the requests waiting for another's answer.
func (c *Cache) Waiting() int64 { return c.waiting.Load() }
