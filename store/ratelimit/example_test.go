package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/infergate/infergate/store/ratelimit"
)

// The guard uses a Limiter through its interface only, so the in-process Local and the shared
// Redis are interchangeable. A new implementation proves it behaves like them by running the
// contract suite from its own tests, ratelimittest.Run with a Harness whose Replica returns it
// (see package ratelimittest); the suite's cases are the specification.
//
// Here a Local limiter on a clock that moves only when told: two requests a second, in bursts
// of at most two, then a token limit reserved on an estimate and settled on the actual usage.
func ExampleLimiter() {
	now := time.Unix(0, 0)
	var lim ratelimit.Limiter = ratelimit.NewLocal(ratelimit.LocalOptions{Now: func() time.Time { return now }})
	ctx := context.Background()
	perSecond := ratelimit.Limit{Rate: 2, Burst: 2}

	for range 3 {
		d, err := ratelimit.AllowRequest(ctx, lim, "key:ada:requests", perSecond)
		if err != nil {
			panic(err) // ErrInvalid, or ErrUnavailable from a shared store that failed closed
		}
		fmt.Printf("allowed=%v remaining=%v retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	now = now.Add(500 * time.Millisecond) // refills one token
	d, _ := ratelimit.AllowRequest(ctx, lim, "key:ada:requests", perSecond)
	fmt.Println("after 500ms: allowed =", d.Allowed)

	tpm := ratelimit.PerMinute(1000)
	d, res, _ := ratelimit.ReserveTokens(ctx, lim, "key:ada:tokens", tpm, 600)
	fmt.Printf("reserved 600: allowed=%v remaining=%v\n", d.Allowed, d.Remaining)
	_ = res.Settle(ctx, 150) // the upstream reported 150 tokens: 450 come back
	d, _ = lim.Allow(ctx, "key:ada:tokens", tpm, 0)
	fmt.Printf("settled at 150: remaining=%v\n", d.Remaining)
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=500ms
	// after 500ms: allowed = true
	// reserved 600: allowed=true remaining=400
	// settled at 150: remaining=850
}
