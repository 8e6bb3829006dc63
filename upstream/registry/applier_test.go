package registry

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
)

func postChat(t *testing.T, r *replica, model string) (int, string) {
	t.Helper()
	res, err := http.Post(r.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("X-Infergate-Endpoint")
}

// Updating a lease moves its model to the new backend; deregistering removes it at once.
func TestApplierUpdateAndDeregister(t *testing.T) {
	store := NewMemoryStore()
	t.Cleanup(store.Close)
	r := startReplica(t, store)
	fake1 := openaitest.Start(t, "fake1", "m")
	fake2 := openaitest.Start(t, "fake2", "m")
	ctx := context.Background()
	backend := func(url string) *registryv1.Backend {
		return &registryv1.Backend{ModelName: "m", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT, Url: url}
	}
	res, err := r.registry.Register(ctx, &registryv1.RegisterRequest{Backend: backend(fake1.URL), Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Contains(r.models(t), "m") }, wait, 10*time.Millisecond)
	code, ep := postChat(t, r, "m")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, EndpointName(res.LeaseId), ep)
	assert.Equal(t, int64(1), fake1.Requests())

	_, err = r.registry.Register(ctx, &registryv1.RegisterRequest{LeaseId: res.LeaseId, Backend: backend(fake2.URL), Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, _ := postChat(t, r, "m")
		return code == http.StatusOK && fake2.Requests() > 0
	}, wait, 10*time.Millisecond, "the updated lease routes to the new URL")
	n1 := fake1.Requests()
	postChat(t, r, "m")
	assert.Equal(t, n1, fake1.Requests(), "nothing goes to the old URL")

	_, err = r.registry.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: res.LeaseId})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !slices.Contains(r.models(t), "m") }, wait, 10*time.Millisecond)
	code, _ = postChat(t, r, "m")
	assert.Equal(t, http.StatusNotFound, code)
}

// Without targets, registrations are only logged.
func TestApplierWithoutTargets(t *testing.T) {
	a := NewApplier(ApplierOptions{Logger: quiet()})
	id := newLeaseID()
	a.Apply(Event{Type: Added, LeaseID: id, Backend: chat("m", "http://h")})
	a.Apply(Event{Type: Updated, LeaseID: id, Backend: normalize(&registryv1.Backend{ModelName: "t",
		ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR, Url: "http://h", TensorModelConfig: tensorDesc("t")})})
	a.Apply(Event{Type: Removed, LeaseID: id})
	a.Apply(Event{Type: Synced})
	assert.Empty(t, a.applied)
}
