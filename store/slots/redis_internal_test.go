package slots

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
)

// flaky passes every command to Redis; while loseNext is set, the next successful script call
// runs in Redis but its caller sees an error (a reply lost to a timeout); while cut is set, script
// calls fail without reaching Redis (a network partition between this holder and Redis).
type flaky struct {
	rueidis.Client
	loseNext atomic.Bool
	cut      atomic.Bool
	gate     chan struct{} // while non-nil and open, script calls block until it closes
	mu       sync.Mutex
}

func (f *flaky) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	first := cmd.Commands()[0]
	script := first == "EVALSHA" || first == "EVAL"
	if script && f.cut.Load() {
		return f.failed()
	}
	if script {
		f.mu.Lock()
		g := f.gate
		f.mu.Unlock()
		if g != nil {
			<-g
		}
	}
	res := f.Client.Do(ctx, cmd)
	if script && res.Error() == nil && f.loseNext.CompareAndSwap(true, false) {
		return f.failed()
	}
	return res
}

// failed returns an error result, as a call that got no reply does.
func (f *flaky) failed() rueidis.RedisResult {
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	return f.Client.Do(dead, f.Client.B().Ping().Build())
}

func client(t *testing.T, addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A lost reply to luaAcquire: Redis granted the only slot and the holder never learned it. Its
// next call says how many it has (absolute), so the slot is not booked to it for nothing and the
// waiter gets it.
func TestLostAcquireReplyHeals(t *testing.T) {
	srv := redistest.Start(t)
	f := &flaky{Client: client(t, srv.Addr)}
	f.loseNext.Store(true)
	r := NewRedis(f, Limits{Default: 1}, RedisOptions{})
	t.Cleanup(r.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	release, err := r.Acquire(ctx, "llama")
	if err != nil {
		held, _ := f.Client.Do(t.Context(), f.Client.B().Hgetall().Key("{infergate:batch:slots:llama}:held").Build()).AsStrMap()
		t.Fatalf("no slot within 3 s after one lost reply (%v); Redis books %v to this holder %s", err, held, r.holder)
	}
	release()
}

// A holder cut off from Redis stops handing the slots it holds to its waiters once its lease may
// have ended: Redis gives them to the other holders then, and using them too would break the
// bound. When Redis answers again the waiter gets a slot as usual.
func TestPartitionedHolderDropsLapsedSlots(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 400 * time.Millisecond
	fa := &flaky{Client: client(t, srv.Addr)}
	a := NewRedis(fa, Limits{Default: 2}, RedisOptions{Lease: lease})
	b := NewRedis(client(t, srv.Addr), Limits{Default: 2}, RedisOptions{Lease: lease})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx := t.Context()
	within := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}

	ra1, err := a.Acquire(within(3*time.Second), "llama")
	if err != nil {
		t.Fatal(err)
	}
	ra2, err := a.Acquire(within(3*time.Second), "llama")
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		release, err := a.Acquire(within(10*time.Second), "llama")
		if err == nil {
			defer release()
		}
		waiter <- err
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is in line

	fa.cut.Store(true)
	rb1, err := b.Acquire(within(5*lease), "llama")
	if err != nil {
		t.Fatalf("b got no slot after a's lease ended: %v", err)
	}
	rb2, err := b.Acquire(within(5*lease), "llama")
	if err != nil {
		t.Fatalf("b got one slot, not two, after a's lease ended: %v", err)
	}
	ra1() // with a live lease a's waiter would take this slot
	select {
	case err := <-waiter:
		t.Fatalf("a's waiter got a slot of a's lapsed lease (err %v) while b holds both: 3 in flight for a limit of 2", err)
	case <-time.After(lease / 2):
	}

	fa.cut.Store(false)
	rb1()
	rb2()
	if err := <-waiter; err != nil {
		t.Fatalf("a's waiter got no slot once Redis answered again: %v", err)
	}
	ra2()
}

// A holder above its share shrinks to its share while its requests end (here during a renewal);
// the slots it keeps go to its waiters, not idle in Redis.
func TestShrinkServesWaiters(t *testing.T) {
	srv := redistest.Start(t)
	fa := &flaky{Client: client(t, srv.Addr)}
	a := NewRedis(fa, Limits{Default: 2}, RedisOptions{})
	b := NewRedis(client(t, srv.Addr), Limits{Default: 2}, RedisOptions{})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx := t.Context()
	r1, err := a.Acquire(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Acquire(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	aWaiter := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rel, err := a.Acquire(c, "llama")
		if err == nil {
			defer rel()
		}
		aWaiter <- err
	}()
	bGot := make(chan func(), 1)
	go func() {
		rel, err := b.Acquire(ctx, "llama") // B keeps its slot: a long request
		if err == nil {
			bGot <- rel
		}
	}()
	pa, _ := a.pool("llama")
	deadline := time.Now().Add(3 * time.Second)
	for {
		pa.mu.Lock()
		share := pa.share
		pa.mu.Unlock()
		if share == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A never learned of B's hunger")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Both of A's requests end while its pump is in a Redis call (a renewal).
	fa.mu.Lock()
	fa.gate = make(chan struct{})
	g := fa.gate
	fa.mu.Unlock()
	time.Sleep(300 * time.Millisecond) // > renewHungry: the pump is blocked in set now
	r1()
	r2()
	fa.mu.Lock()
	fa.gate = nil
	fa.mu.Unlock()
	close(g)
	select {
	case rel := <-bGot:
		defer rel()
	case <-time.After(3 * time.Second):
		t.Fatal("B got nothing")
	}
	if err := <-aWaiter; err != nil {
		pa.mu.Lock()
		t.Errorf("A's waiter got no slot (%v) while A holds %d slots, %d of them used", err, pa.held, pa.used)
		pa.mu.Unlock()
	}
}

// A pool idle for a lease is dropped with its pump: model names come from users' files.
func TestIdlePoolDropped(t *testing.T) {
	srv := redistest.Start(t)
	r := NewRedis(client(t, srv.Addr), Limits{Default: 2}, RedisOptions{Lease: 200 * time.Millisecond})
	t.Cleanup(r.Close)
	for _, m := range []string{"a", "b", "c"} {
		release, err := r.Acquire(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.pools)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pools left after their lease", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A dropped key works again.
	release, err := r.Acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	release()
}

// Local forgets a key nobody holds or waits for.
func TestLocalForgetsIdleKeys(t *testing.T) {
	l := NewLocal(Limits{Default: 1})
	release, err := l.Acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "a"); err == nil {
		t.Fatal("a second slot of a key with one")
	}
	release()
	l.mu.Lock()
	n := len(l.sems)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys kept after their last release", n)
	}
}
