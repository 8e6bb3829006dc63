package kserve_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/health/grpc_health_v1"
)

func TestHealthServiceWithGRPCGoClient(t *testing.T) {
	srv := start(t)
	h := grpc_health_v1.NewHealthClient(clients(t, srv)[0].conn)
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		res, err := h.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		assert.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, res.Status, svc)
	}
}

func TestShutdownDrainsInFlightStreams(t *testing.T) {
	srv := start(t)
	c := streamClients(t, srv)[0]
	s := openStream(context.Background(), t, c)
	require.NoError(t, s.Send(repeatRequest("drain", []int32{1, 2, 3, 4, 5}, 100)))
	require.NoError(t, s.CloseSend())
	first, err := s.Recv()
	require.NoError(t, err)
	assert.Equal(t, []int32{1}, int32s(first.InferResponse.RawOutputContents[0]))

	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(10 * time.Second) }()
	require.Eventually(t, func() bool { return !srv.Gateway.Ready() }, 5*time.Second, time.Millisecond,
		"readiness turns false as soon as the drain starts")

	rest, err := recvAll(t, s)
	require.NoError(t, err, "the in-flight stream finishes normally")
	require.Len(t, rest, 4)
	assert.Equal(t, []int32{5}, int32s(rest[3].InferResponse.RawOutputContents[0]))
	require.NoError(t, <-stopped)

	_, err = net.DialTimeout("tcp", srv.Addr, time.Second)
	assert.Error(t, err, "no new connections after shutdown")
}

func TestShutdownDrainTimeoutEndsStuckStreams(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{DrainTimeout: 200 * time.Millisecond})
	c := streamClients(t, srv)[0]
	s := openStream(context.Background(), t, c)
	require.NoError(t, s.Send(repeatRequest("stuck", make([]int32, 100), 1000))) // 100 s of work
	first, err := s.Recv()
	require.NoError(t, err)
	assert.Equal(t, "stuck", first.InferResponse.Id)

	err = srv.Stop(time.Minute)
	require.Error(t, err, "the drain gave up on the stuck stream")
	_, err = recvAll(t, s)
	require.Error(t, err, "the stuck stream was ended, not left hanging")
}

func TestDrainingStreamRefusesNewRequests(t *testing.T) {
	srv := start(t)
	s := openStream(context.Background(), t, streamClients(t, srv)[0])
	require.NoError(t, s.Send(simpleRequest("before")))
	m, err := s.Recv()
	require.NoError(t, err)
	assert.Empty(t, m.ErrorMessage)

	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(10 * time.Second) }()
	require.Eventually(t, func() bool { return !srv.Gateway.Ready() }, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Send(simpleRequest("after")))
	m, err = s.Recv()
	require.NoError(t, err)
	assert.Equal(t, "after", m.InferResponse.Id)
	assert.Equal(t, "Server is stopping", m.ErrorMessage)
	require.NoError(t, s.CloseSend())
	_, err = recvAll(t, s)
	require.NoError(t, err)
	require.NoError(t, <-stopped)
}
