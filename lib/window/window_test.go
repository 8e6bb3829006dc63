package window

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_800_000_000, 0)

func TestBuckets(t *testing.T) {
	// Every duration lies in its bucket: at or under its upper bound, above the previous one's.
	for _, d := range []time.Duration{0, time.Microsecond, 31 * time.Microsecond, 32 * time.Microsecond,
		100 * time.Microsecond, time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond, time.Second,
		30 * time.Second, 133 * time.Second} {
		b := bucketOf(d)
		require.Less(t, b, Buckets-1, d)
		assert.LessOrEqual(t, d, bucketUpper(b), "%v in bucket %d", d, b)
		if b > 0 {
			assert.Greater(t, d, bucketUpper(b-1)-time.Microsecond, "%v in bucket %d", d, b)
			// A bucket spans at most a quarter of its lower bound: percentiles are within 25%.
			assert.LessOrEqual(t, float64(bucketUpper(b)-bucketUpper(b-1)), 0.25*float64(bucketUpper(b-1))+1e3)
		}
	}
	assert.Equal(t, Buckets-1, bucketOf(time.Hour), "past the last bound: the overflow bucket")
	for b := 1; b < Buckets-1; b++ {
		assert.Greater(t, bucketUpper(b), bucketUpper(b-1), "bounds increase")
	}
}

func TestPercentiles(t *testing.T) {
	r := New(60, time.Second, 2)
	// 100 requests: 1 ms .. 100 ms; p50 is 50 ms, p99 99 ms, read as their buckets' bounds.
	for i := 1; i <= 100; i++ {
		r.Record(t0, &Event{Counts: Counts{Requests: 1}, Latency: time.Duration(i) * time.Millisecond, TTFT: 5 * time.Millisecond})
	}
	pt := r.Total(t0, 60)
	assert.EqualValues(t, 100, pt.Counts.Requests)
	p50, p99 := pt.Hists[0].Quantile(0.5), pt.Hists[0].Quantile(0.99)
	assert.InDelta(t, 50, p50.Seconds()*1000, 50*0.2, "p50 %v", p50)
	assert.InDelta(t, 99, p99.Seconds()*1000, 99*0.2, "p99 %v", p99)
	assert.GreaterOrEqual(t, p50, 50*time.Millisecond, "an upper bound")
	assert.InDelta(t, 5, pt.Hists[1].Quantile(0.5).Seconds()*1000, 1)
	assert.Zero(t, pt.Hists[2].Quantile(0.5), "a ring of two histograms keeps no third")
	var empty Histogram
	assert.Zero(t, empty.Quantile(0.99))
}

func TestRollover(t *testing.T) {
	r := New(10, time.Second, 1)
	for s := range 10 {
		r.Record(t0.Add(time.Duration(s)*time.Second), &Event{Counts: Counts{Requests: int64(s + 1), TokensOut: 10}})
	}
	now := t0.Add(9 * time.Second)
	pts := r.Series(now, 1)
	require.Len(t, pts, 10)
	for s, pt := range pts {
		assert.EqualValues(t, s+1, pt.Counts.Requests, "second %d", s)
	}
	assert.EqualValues(t, 55, r.Total(now, 10).Counts.Requests)
	assert.EqualValues(t, 10+9, r.Total(now, 2).Counts.Requests, "the last two seconds")

	// Three seconds on, the three oldest seconds have left the window; their slots are reused.
	later := now.Add(3 * time.Second)
	r.Record(later, &Event{Counts: Counts{Requests: 100}})
	tot := r.Total(later, 10)
	assert.EqualValues(t, 4+5+6+7+8+9+10+100, tot.Counts.Requests)
	pts = r.Series(later, 1)
	assert.EqualValues(t, 4, pts[0].Counts.Requests, "the oldest second still in the window")
	assert.Zero(t, pts[8].Counts.Requests, "a second nothing was recorded in")
	assert.EqualValues(t, 100, pts[9].Counts.Requests)

	// An event older than the window is dropped, not counted in a newer period's slot.
	r.Record(t0, &Event{Counts: Counts{Requests: 1000}})
	assert.Equal(t, tot.Counts, r.Total(later, 10).Counts)

	// After a long silence the window is empty.
	assert.Zero(t, r.Total(later.Add(time.Hour), 10).Counts.Requests)
}

func TestSeriesSteps(t *testing.T) {
	r := New(900, time.Second, 1)
	now := t0.Add(899 * time.Second)
	for s := range 900 {
		r.Record(t0.Add(time.Duration(s)*time.Second), &Event{Counts: Counts{Requests: 2}, Latency: time.Millisecond})
	}
	pts := r.Series(now, 10)
	require.Len(t, pts, 90)
	for _, pt := range pts {
		assert.EqualValues(t, 20, pt.Counts.Requests)
		assert.InDelta(t, 2, pt.Rate(pt.Counts.Requests), 1e-9)
		assert.EqualValues(t, 10, pt.Hists[0].Count(), "one latency per event")
	}
	assert.Len(t, r.Series(now, 0), 1)
	assert.EqualValues(t, 1800, r.Series(now, 0)[0].Counts.Requests)

	// Minutes: the current minute's point spans the seconds so far.
	m := New(15, time.Minute, 0)
	m.Record(t0.Add(30*time.Second), &Event{Counts: Counts{Requests: 31}})
	pt := m.Total(t0.Add(30*time.Second), 1)
	assert.EqualValues(t, (1_800_000_000+30)%60+1, pt.Seconds)
}

// TestBoundedMemory: recording allocates nothing, whatever the number of events and periods; the
// ring's size is what New made.
func TestBoundedMemory(t *testing.T) {
	r := New(900, time.Second, 2)
	ev := &Event{Counts: Counts{Requests: 1, TokensIn: 3}, Latency: 3 * time.Millisecond, TTFT: time.Millisecond}
	now := t0
	allocs := testing.AllocsPerRun(10_000, func() {
		now = now.Add(137 * time.Millisecond)
		r.Record(now, ev)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, 900, r.Len())
	// 900 slots of two histograms of Buckets uint32: about 730 KB, and no more after a day.
	assert.Less(t, r.Bytes(), 750_000)
	assert.Greater(t, r.Bytes(), 900*2*Buckets*4)

	k := NewKeyed(3, 15, time.Minute, 0)
	for i := range 10 {
		k.Of(fmt.Sprint("key", i)).Record(t0, &Event{Counts: Counts{Requests: 1}})
	}
	names := map[string]int64{}
	k.Each(func(name string, r *Ring) { names[name] = r.Total(t0, 15).Counts.Requests })
	assert.Len(t, names, 4, "three names and the rest under Other")
	assert.EqualValues(t, 7, names[Other])
	assert.Equal(t, 4*k.others.Bytes(), k.Bytes())
}

// TestConcurrentRecord: records from many goroutines at once, across a period's change, are all
// counted (run with -race: the adds are atomic, the reset is serialized).
func TestConcurrentRecord(t *testing.T) {
	r := New(60, time.Second, 2)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				now := t0.Add(time.Duration((g+i)%3) * time.Second)
				r.Record(now, &Event{Counts: Counts{Requests: 1, TokensOut: 2}, Latency: time.Millisecond})
			}
		})
	}
	wg.Wait()
	pt := r.Total(t0.Add(2*time.Second), 60)
	assert.EqualValues(t, 16000, pt.Counts.Requests)
	assert.EqualValues(t, 32000, pt.Counts.TokensOut)
	assert.EqualValues(t, 16000, pt.Hists[0].Count())
}
