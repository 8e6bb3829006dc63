package batchstate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyLock(t *testing.T) {
	var k keyLock
	ctx := context.Background()
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				unlock, err := k.lock(ctx, "a")
				if !assert.NoError(t, err) {
					return
				}
				n := in.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(time.Microsecond)
				in.Add(-1)
				unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load(), "one holder at a time")

	unlock, err := k.lock(ctx, "a")
	require.NoError(t, err)
	other, err := k.lock(ctx, "b")
	require.NoError(t, err, "another key is not held up")
	other()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = k.lock(cctx, "a")
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a waiter gives up when its context ends")
	unlock()
	assert.Empty(t, k.m, "no entry is kept for keys nobody holds")
}
