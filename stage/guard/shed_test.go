package guard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/guard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShedderUnboundedAdmitsEverything(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{})
	assert.False(t, s.Bounded())
	for range 1000 {
		_, err := s.Acquire(context.Background(), "m", guard.Online)
		require.NoError(t, err)
	}
}

func TestShedderGlobalBoundAndQueue(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 2, MaxQueue: 1, QueueTimeout: 5 * time.Second})
	ctx := context.Background()
	r1, err := s.Acquire(ctx, "a", guard.Online)
	require.NoError(t, err)
	r2, err := s.Acquire(ctx, "b", guard.Online)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		r, err := s.Acquire(ctx, "a", guard.Online)
		if err == nil {
			defer r()
		}
		got <- err
	}()
	// The third request waits (queue of 1); a fourth finds the queue full and is refused at once.
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	_, err = s.Acquire(ctx, "c", guard.Online)
	assert.Equal(t, guard.ErrOverloaded, err)
	assert.Equal(t, guard.ShedderStats{InFlight: 2, Waiting: 1}, s.Stats())
	select {
	case err := <-got:
		t.Fatalf("the queued request finished before a slot was freed: %v", err)
	default:
	}
	r1()
	require.NoError(t, <-got, "a freed slot goes to the waiter")
	r1() // a second release is a no-op
	r2()
}

func TestShedderQueueTimeoutAndCancel(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 1, MaxQueue: 10, QueueTimeout: 20 * time.Millisecond})
	r, err := s.Acquire(context.Background(), "m", guard.Online)
	require.NoError(t, err)
	defer r()
	_, err = s.Acquire(context.Background(), "m", guard.Online)
	assert.Equal(t, guard.ErrQueueTimeout, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Acquire(ctx, "m", guard.Online)
	assert.Equal(t, context.Canceled, err)
	assert.GreaterOrEqual(t, s.RetryAfter(), time.Second)
}

// A model at its own bound does not hold up requests for other models queued behind it.
func TestShedderPerModelBound(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 10, MaxInFlightPerModel: 1,
		Models: map[string]int{"big": 2}, MaxQueue: 10, QueueTimeout: 5 * time.Second})
	ctx := context.Background()
	ra, err := s.Acquire(ctx, "a", guard.Online)
	require.NoError(t, err)
	waitA := make(chan error, 1)
	go func() {
		r, err := s.Acquire(ctx, "a", guard.Online)
		if err == nil {
			r()
		}
		waitA <- err
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	rb, err := s.Acquire(ctx, "b", guard.Online)
	require.NoError(t, err, "b has room of its own, whoever waits for a")
	rb()
	for range 2 {
		r, err := s.Acquire(ctx, "big", guard.Online)
		require.NoError(t, err, "the per-model override allows 2")
		defer r()
	}
	ra()
	require.NoError(t, <-waitA)
}

// Online waiters are served before batch waiters, and batch never holds more than its share.
func TestShedderOnlineBeforeBatch(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 4, BatchShare: 0.5, MaxQueue: 100, QueueTimeout: 5 * time.Second})
	ctx := context.Background()
	var held []func()
	for range 2 {
		r, err := s.Acquire(ctx, "m", guard.Batch)
		require.NoError(t, err)
		held = append(held, r)
	}
	// A third batch request exceeds the batch share although 2 slots are free: it waits.
	batchDone := make(chan struct{})
	go func() {
		r, err := s.Acquire(ctx, "m", guard.Batch)
		if err == nil {
			r()
		}
		close(batchDone)
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond,
		"the third batch request waits although half the slots are free")
	for range 2 {
		r, err := s.Acquire(ctx, "m", guard.Online)
		require.NoError(t, err, "online traffic gets the rest")
		held = append(held, r)
	}
	// Now full. Queue one batch (already queued above) and one online request; freeing one
	// online slot must go to the online waiter first.
	var order []string
	var mu sync.Mutex
	onlineDone := make(chan struct{})
	go func() {
		r, err := s.Acquire(ctx, "m", guard.Online)
		if err == nil {
			mu.Lock()
			order = append(order, "online")
			mu.Unlock()
			r()
		}
		close(onlineDone)
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 2 }, 5*time.Second, time.Millisecond)
	held[2]() // an online slot frees: batch is still at its share, online waiter gets it
	<-onlineDone
	select {
	case <-batchDone:
		t.Fatal("the batch request got a slot while batch held its whole share")
	default:
	}
	held[0]() // a batch slot frees: the batch waiter gets it
	<-batchDone
	assert.Equal(t, []string{"online"}, order)
	held[1]()
	held[3]()
}

// Under concurrent load the bound holds exactly and every admitted request is released.
func TestShedderConcurrentBound(t *testing.T) {
	s := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 3, MaxQueue: 1000, QueueTimeout: 10 * time.Second})
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			p := guard.Online
			if i%3 == 0 {
				p = guard.Batch
			}
			r, err := s.Acquire(context.Background(), "m", p)
			if err != nil {
				t.Error(err)
				return
			}
			n := cur.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			cur.Add(-1)
			r()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(3))
	r, err := s.Acquire(context.Background(), "m", guard.Online)
	require.NoError(t, err, "all slots came back")
	r()
}
