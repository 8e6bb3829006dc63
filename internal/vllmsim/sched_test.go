package vllmsim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSchedulerFIFO(t *testing.T) {
	s := &scheduler{limit: 1}
	require.NoError(t, s.acquire(context.Background()))
	order := make(chan int, 3)
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		c := context.Background()
		if i == 1 {
			c = ctx // leaves the queue before its turn
		}
		go func() {
			if s.acquire(c) == nil {
				order <- i
				s.release()
			}
		}()
		require.Eventually(t, func() bool { _, w := s.load(); return w == i+1 }, 5*time.Second, time.Millisecond)
	}
	cancel()
	require.Eventually(t, func() bool { _, w := s.load(); return w == 2 }, 5*time.Second, time.Millisecond)
	s.release()
	assert.Equal(t, 0, <-order)
	assert.Equal(t, 2, <-order)
	require.Eventually(t, func() bool { r, w := s.load(); return r == 0 && w == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 3, s.maxWaiting)
}

func TestPseudoTokens(t *testing.T) {
	a, b := pseudoTokens([]byte("hello world!")), pseudoTokens([]byte("hello world?"))
	assert.Len(t, a, 3)
	assert.Equal(t, a[:2], b[:2], "equal prefixes, equal tokens")
	assert.NotEqual(t, a[2], b[2])
	assert.Len(t, pseudoTokens([]byte("hello")), 2, "the last token is shorter")

	h := blockHashes([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)
	assert.Len(t, h, 2, "the partial block has no hash")
	assert.NotEqual(t, h[1], blockHashes([]int64{5, 6, 7, 8}, 4)[0], "a block's hash covers its prefix")
}
