package vllmsim

import (
	"context"
	"slices"
	"sync"
)

// scheduler admits at most limit requests at once and queues the rest first come, first served,
// as vLLM's scheduler does beyond max_num_seqs. It is safe for concurrent use.
type scheduler struct {
	limit int

	mu         sync.Mutex
	running    int
	queue      []chan struct{} // closed when the waiter is handed a slot
	maxWaiting int             // most requests queued at once since the last reset
}

// acquire waits for a slot. It fails only when ctx ends first; the slot is then not taken.
func (s *scheduler) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.running < s.limit && len(s.queue) == 0 {
		s.running++
		s.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	s.queue = append(s.queue, turn)
	s.maxWaiting = max(s.maxWaiting, len(s.queue))
	s.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		if i := slices.Index(s.queue, turn); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
			s.mu.Unlock()
			return ctx.Err()
		}
		s.mu.Unlock()
		s.release() // handed a slot as ctx ended: pass it on
		return ctx.Err()
	}
}

// release frees a slot, handing it straight to the longest waiter so no newcomer overtakes it.
func (s *scheduler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		close(s.queue[0])
		s.queue = s.queue[1:]
		return
	}
	s.running--
}

// load is the requests running and waiting now.
func (s *scheduler) load() (running, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, len(s.queue)
}
