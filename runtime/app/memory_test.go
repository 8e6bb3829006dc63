package app

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/require"
)

// TestMemoryAfterLoad (INFERGATE_MEMORY_TEST=1 go test ./runtime/app -run TestMemoryAfterLoad -v)
// runs the binary through a burst of 3,000 concurrent five-second streams
// and then leaves it idle: its resident set must come back to within twice what it was idle
// before the burst, within a minute of the burst ending. Go's runtime alone holds the burst's
// heap until the next GC, which an idle process only has every two minutes, and then hands pages
// back to the OS a little at a time.
func TestMemoryAfterLoad(t *testing.T) {
	if os.Getenv("INFERGATE_MEMORY_TEST") == "" {
		// Not in the default run: on a machine whose cores other work holds (CI runs packages
		// side by side) the binary can be starved long enough to look idle mid-burst, and it
		// has ended at up to 2.7x its idle RSS so; alone it ends at 1.6x within seconds, and
		// CI runs it alone (.ci/run).
		t.Skip("set INFERGATE_MEMORY_TEST=1: 3,000 streams through the binary, then up to a minute idle")
	}
	const streams = 3000
	up := openaitest.Start(t, "up", "llama")
	up.SetStream(50, 100*time.Millisecond) // five seconds a stream
	cfg := filepath.Join(t.TempDir(), "infergate.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, "builtin_models: false\nupstreams:\n  - {name: up, url: %s, type: vllm}\n", up.URL), 0o600))
	addr, cmd := startProcess(t, nil, "/health", "-config", cfg)
	base := "http://" + addr
	pid := cmd.Process.Pid

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	post := func(body []byte) error {
		res, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", res.StatusCode)
		}
		return nil
	}
	chat := []byte(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	stream := []byte(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Eventually(t, func() bool { return post(chat) == nil }, 20*time.Second, 50*time.Millisecond)
	time.Sleep(time.Second)
	idle := rssKB(t, pid)

	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
				peak.Store(max(peak.Load(), rssKB(t, pid)))
			}
		}
	}()
	start := time.Now()
	for i := range streams {
		if i%100 == 99 {
			// 3,000 dials at once can overrun the listen backlog on a loaded machine; a
			// few ms between hundreds keeps them all concurrent (each stream lasts 5 s).
			time.Sleep(5 * time.Millisecond)
		}
		wg.Go(func() {
			if err := post(stream); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	load := time.Since(start)
	client.CloseIdleConnections()
	require.Zero(t, failed.Load(), "streams failed: %v", firstErr.Load())
	atEnd := rssKB(t, pid)
	t.Logf("idle %d MiB; %d streams in %v, peak %d MiB, %d MiB at the end", idle>>10, streams, load.Round(time.Millisecond), peak.Load()>>10, atEnd>>10)

	var back time.Duration
	for s := time.Duration(0); s <= time.Minute; s += time.Second {
		if rss := rssKB(t, pid); rss <= 2*idle {
			back = s
			t.Logf("back to %d MiB (%.2fx idle) %v after the burst", rss>>10, float64(rss)/float64(idle), s)
			return
		} else if s%(10*time.Second) == 0 {
			t.Logf("%v after: %d MiB", s, rss>>10)
		}
		time.Sleep(time.Second)
	}
	t.Errorf("RSS %d MiB a minute after the burst: more than twice the %d MiB idle (back=%v)", rssKB(t, pid)>>10, idle>>10, back)
}
