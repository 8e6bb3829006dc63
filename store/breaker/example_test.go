package breaker_test

import (
	"context"
	"fmt"

	"github.com/infergate/infergate/store/breaker"
)

// A router asks the breaker before sending to an endpoint, skips the ones it refuses, and
// reports every outcome.
func Example() {
	b := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 2}})
	ctx := context.Background()
	send := func(endpoint string) (status int, err error) {
		if endpoint == "vllm-a" {
			return 503, nil
		}
		return 200, nil
	}
	for range 3 {
		for _, ep := range []string{"vllm-a", "vllm-b"} { // in order of preference
			t, err := b.Allow(ctx, ep)
			if err != nil {
				continue // errors.Is(err, breaker.ErrOpen): try the next one
			}
			status, err := send(ep)
			t.Done(breaker.Classify(status, err))
			fmt.Println(ep, status)
			if status < 500 {
				break
			}
		}
	}
	fmt.Println("vllm-a is", b.State("vllm-a"))
	// Output:
	// vllm-a 503
	// vllm-b 200
	// vllm-a 503
	// vllm-b 200
	// vllm-b 200
	// vllm-a is open
}
