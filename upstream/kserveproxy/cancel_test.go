package kserveproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/store/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClientCancelsAreNotUpstreamFailures: clients that cancel their gRPC call, or drop their
// HTTP connection, while the upstream works on their request say nothing about the upstream
// (issue 17: a gateway peer opens its breaker on client disconnects). More of them than the
// breaker's consecutive failures leave it closed and the next call is served; the upstream's own
// failures still open it.
func TestClientCancelsAreNotUpstreamFailures(t *testing.T) {
	started := make(chan struct{}, 1)
	slowOrFailing := func(ctx context.Context, r *engines.Request, send func(*engines.Response) error) error {
		switch int32s(r.Input("INPUT").Data)[0] {
		case 0: // runs until its caller gives up
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		case -1:
			return connect.NewError(connect.CodeInternal, errors.New("GPU fell off the bus"))
		}
		return echo(ctx, r, send)
	}
	up := startUpstream(t, &testModel{name: "m", exec: slowOrFailing})
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 2, ErrorRate: -1, OpenTimeout: time.Hour}})
	opts := fast(slowChecks(ep("a", up.Addr, 0)))
	opts.Breaker = br
	f := startFront(t, opts)
	f.waitModel(t, "m")
	front := f.Registry.Lookup("m")

	const gaveUp = 6 // three of each, three times ConsecutiveFailures
	for i := range gaveUp {
		if i%2 == 0 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-started
				cancel()
			}()
			_, err := f.client.ModelInfer(ctx, testRequest("m", 0))
			require.Equal(t, codes.Canceled, status.Code(err), "%v", err)
		} else {
			c, err := net.Dial("tcp", f.Addr)
			require.NoError(t, err)
			body := `{"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1],"data":[0]}]}`
			_, err = fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			require.NoError(t, err)
			<-started
			require.NoError(t, c.Close())
		}
		// The front's request has ended, and its outcome was reported, once it is counted.
		require.Eventually(t, func() bool { return front.Stats.Fail.Count() == uint64(i+1) },
			10*time.Second, time.Millisecond, "request %d still running at the front", i)
	}
	assert.Equal(t, breaker.Closed, br.State("a"), "clients giving up are not upstream failures")
	res, err := f.client.ModelInfer(context.Background(), testRequest("m", 7))
	require.NoError(t, err)
	assert.Equal(t, []int32{7}, int32s(res.RawOutputContents[0]))

	for range 2 {
		_, err := f.client.ModelInfer(context.Background(), testRequest("m", -1))
		require.Equal(t, codes.Internal, status.Code(err))
	}
	assert.Equal(t, breaker.Open, br.State("a"), "the upstream's own failures still count")
}
