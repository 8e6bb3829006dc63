package batch_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/surface/batch"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// answer is a response as a client sees it, and how long it took.
type answer struct {
	status int
	header http.Header
	body   string
	took   time.Duration
}

// send sends a request with an optional JSON body. The client gives up after 15 s, so a route
// that hangs fails the test rather than holding it.
func (e *env) send(t *testing.T, method, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{status: res.StatusCode, header: res.Header, body: string(b), took: time.Since(start)}
}

// requireStateUnavailable checks a 503 with Retry-After and OpenAI's error object, within a
// bound that tells an answer from the client's wait for Redis (100 s observed before the fix).
func requireStateUnavailable(t *testing.T, a answer, what string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%s: %s", what, a.body)
	require.Less(t, a.took, 10*time.Second, what)
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	require.NoError(t, err, "%s: Retry-After %q", what, a.header.Get("Retry-After"))
	require.Positive(t, secs, what)
	var er struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &er), a.body)
	require.Equal(t, "server_error", er.Error.Type, what)
	require.NotNil(t, er.Error.Code, what)
	require.Equal(t, "state_unavailable", *er.Error.Code, what)
	require.Contains(t, er.Error.Message, "cannot be reached", what)
}

// With the batch state's Redis down (killed) or hung (its traffic held, as SIGSTOP would), every
// Batches route, and deleting a file (which reads the batches), answers 503 with Retry-After and
// OpenAI's error object within StoreTimeout rather than waiting for Redis; once Redis is back
// the routes work again.
func TestStateStoreDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts against a stopped Redis")
	}
	for _, mode := range []string{"killed", "hung"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			addr := srv.Addr
			var px *redistest.Proxy
			if mode == "hung" {
				px = redistest.StartProxy(t, srv.Addr)
				addr = px.Addr
			}
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rc.Close)
			e := startEnv(t, envOptions{state: batchstate.NewRedis(rc, batchstate.RedisOptions{Prefix: "t"}),
				service: func(o *batch.Options) { o.StoreTimeout = time.Second }})
			file := e.upload(t, chatLines(2, "m1"))
			id := e.create(t, file, "24h")
			e.waitStatus(t, id, 10*time.Second, "completed")
			other := e.upload(t, chatLines(1, "m1"))
			create := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, other)

			if mode == "hung" {
				px.Freeze()
			} else {
				srv.Kill()
			}
			requireStateUnavailable(t, e.send(t, http.MethodGet, "/v1/batches", ""), "list")
			requireStateUnavailable(t, e.send(t, http.MethodGet, "/v1/batches/"+id, ""), "get")
			requireStateUnavailable(t, e.send(t, http.MethodPost, "/v1/batches", create), "create")
			requireStateUnavailable(t, e.send(t, http.MethodPost, "/v1/batches/"+id+"/cancel", ""), "cancel")
			requireStateUnavailable(t, e.send(t, http.MethodDelete, "/v1/files/"+other, ""), "delete a file")
			// What needs no batch state still works.
			require.Equal(t, http.StatusOK, e.send(t, http.MethodGet, "/v1/files/"+file, "").status)

			if mode == "hung" {
				px.Thaw()
				require.Equal(t, http.StatusOK, e.send(t, http.MethodGet, "/v1/batches/"+id, "").status)
			} else {
				srv.Restart() // an empty dataset: the batch is gone with the old server
				require.Equal(t, http.StatusNotFound, e.send(t, http.MethodGet, "/v1/batches/"+id, "").status)
			}
			require.Equal(t, http.StatusOK, e.send(t, http.MethodGet, "/v1/batches", "").status)
			e.up.SetLatency(time.Minute) // the batch is still running when it is cancelled
			again := e.create(t, other, "24h")
			require.Equal(t, http.StatusOK, e.send(t, http.MethodPost, "/v1/batches/"+again+"/cancel", "").status)
			e.waitStatus(t, again, 10*time.Second, "cancelled")
			require.Equal(t, http.StatusOK, e.send(t, http.MethodDelete, "/v1/files/"+other, "").status)
		})
	}
}
