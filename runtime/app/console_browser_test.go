package app

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/batch/batchtest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium is the path of a headless-capable Chromium, or skips the test without one (fails it
// when INFERGATE_REQUIRE_CHROMIUM=1, which .ci/run sets after installing Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("INFERGATE_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not on PATH and INFERGATE_REQUIRE_CHROMIUM=1: apt-get install -y chromium")
	}
	t.Skip("chromium is not on PATH: the console's browser test needs it (apt-get install -y chromium; INFERGATE_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a tab's context.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("mute-audio", true)}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser; its context must outlive the test's actions.
	require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{})
		return err
	})))
	return ctx
}

// withHeaders sends the headers with every request of the tab (the page and its polls).
func withHeaders(h network.Headers) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h})
		return err
	})
}

func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

// documentStatus navigates to url and returns the status of the document's response, as the
// network saw it, whether or not the page then loaded.
func documentStatus(t *testing.T, ctx context.Context, url string) int64 {
	t.Helper()
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	events := chromedp.Events(ectx, network.ResponseReceived)
	err := chromedp.Do(ctx, chromedp.Navigate(url))
	t.Logf("navigation without a key: %v", err)
	for ev, err := range events {
		require.NoError(t, err)
		if ev.Type == network.ResourceTypeDocument && ev.Response.URL == url {
			return ev.Response.Status
		}
	}
	return 0
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// screenshot saves a PNG of the page to the test's artefacts: $INFERGATE_SCREENSHOTS when set,
// else the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("INFERGATE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	p := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot %s (%d KB)", p, len(png)/1024)
}

// TestConsoleBrowser drives a real headless Chromium against a gateway with two fake upstreams
// and checks what an operator would: the admin key is required (401 without it, 403 with a
// user's, the page with an admin's), a cache hit raises the model's hit rate, a batch's bar
// advances, an upstream that dies turns red within one health interval, and the page reads at
// phone width in dark mode. Screenshots are saved (screenshot).
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	path := chromium(t)
	// The upstreams' health check interval, and how often the page polls (its ?refresh=).
	const interval, poll = 2 * time.Second, 250 * time.Millisecond
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	a.SetLatency(200 * time.Millisecond) // a batch of 12 one-line chunks, one at a time: over 2 s
	b.SetLatency(200 * time.Millisecond)
	addr := startInProcess(t, fmt.Sprintf(`
upstreams:
  - {name: a, url: %s, type: vllm, check_interval: %s}
  - {name: b, url: %s, type: vllm, check_interval: %s}
models:
  llama: {cache: {}}
auth:
  keys:
    - {name: user, sha256: %s, models: [llama]}
    - {name: ops, sha256: %s, admin: true}
batch: {dir: %s, concurrency: 1, chunk_lines: 1}
`, a.URL, interval, b.URL, interval, guard.HashKey(secUserKey), guard.HashKey(secAdminKey), t.TempDir()))
	page := fmt.Sprintf("http://%s/console?refresh=%d", addr, poll.Milliseconds())
	ctx := browser(t, path)

	// The key is required. Without one the gateway answers 401 asking for Basic credentials,
	// which a headless browser cannot give: its navigation fails on them.
	assert.EqualValues(t, http.StatusUnauthorized, documentStatus(t, ctx, page), "no key")
	basic := func(key string) network.Headers {
		return network.Headers{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+key))}
	}
	require.NoError(t, chromedp.Do(ctx, withHeaders(basic(secUserKey))))
	res, err := chromedp.Run(ctx, chromedp.NavigateResponse(page))
	require.NoError(t, err)
	assert.EqualValues(t, http.StatusForbidden, res.Status, "a user's key")
	require.NoError(t, chromedp.Do(ctx, withHeaders(basic(secAdminKey))))
	res, err = chromedp.Run(ctx, chromedp.NavigateResponse(page))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusOK, res.Status, "an admin's key")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`tr[data-llm="llama"]`)))
	assert.Equal(t, "live", eval[string](t, ctx, `document.getElementById("status").textContent`))
	ups := `[...document.querySelectorAll("tr[data-upstream]")].map(r => r.dataset.upstream + ":" + r.className).join(",")`
	assert.Equal(t, "a:up,b:up", eval[string](t, ctx, ups))
	// A tensor model's stages, as its LLM's are shown: the built-in simple's, and a sequence
	// model's with its batcher.
	stages := func(model string) string {
		return eval[string](t, ctx, `document.querySelector('tr[data-tensor="`+model+`"] td.stages').textContent`)
	}
	assert.Equal(t, "tracing → validation → guard → in-process model (CPU)", stages("simple"))
	assert.Equal(t, "tracing → validation → guard → sequence batcher → in-process model (CPU)", stages("simple_sequence"))

	// A cache hit raises the hit rate.
	hitRate := func() float64 {
		v := eval[string](t, ctx, `document.querySelector('tr[data-llm="llama"] [data-cache-hit-rate]').dataset.cacheHitRate`)
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	before := hitRate()
	require.Equal(t, http.StatusOK, chatAs(t, addr, secUserKey, "cache me"))
	require.Equal(t, http.StatusOK, chatAs(t, addr, secUserKey, "cache me"))
	require.Eventually(t, func() bool { return hitRate() > before }, 5*time.Second, 50*time.Millisecond,
		"the hit rate rises from %v", before)

	// A batch's bar advances.
	var lines strings.Builder
	for i := range 12 {
		fmt.Fprintf(&lines, `{"custom_id":"l%d","method":"POST","url":"/v1/chat/completions","body":{"model":"llama","messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	file := batchtest.Upload(t, "http://"+addr, secUserKey, lines.String())
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/batches",
		[]byte(`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`),
		"Authorization", "Bearer "+secUserKey, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	done := func() int {
		return eval[int](t, ctx, `(() => { const b = document.querySelector("[data-batch]"); return b ? Number(b.dataset.done) : -1 })()`)
	}
	var first int
	require.Eventually(t, func() bool { first = done(); return first > 0 }, 10*time.Second, 25*time.Millisecond, "the bar starts")
	require.Eventually(t, func() bool { return done() > first }, 10*time.Second, 25*time.Millisecond, "the bar advances past %d", first)
	width := eval[string](t, ctx, `document.querySelector("[data-batch] .bar .done").style.width`)
	assert.NotEqual(t, "0.00%", width)
	screenshot(t, ctx, "console-desktop")

	require.Eventually(t, func() bool { return done() == 12 }, 15*time.Second, 50*time.Millisecond, "the batch ends")

	// An upstream that dies with no request on it turns red within one health interval and one
	// poll of the page: its next health check, due at most an interval after the last one, finds
	// it (a refused connection: at once), and the page's next poll shows it. The margin is for
	// that check, the poll's round trip and drawing, and this loop's own tick.
	const margin = 500 * time.Millisecond
	b.Stop()
	killed := time.Now()
	require.Eventually(t, func() bool { return eval[string](t, ctx, ups) == "a:up,b:down" },
		interval+poll+margin, 25*time.Millisecond, "b turns red")
	t.Logf("b shown down %v after it stopped (health interval %v)", time.Since(killed).Round(10*time.Millisecond), interval)
	assert.NotEmpty(t, eval[string](t, ctx, `document.querySelector('tr[data-upstream="b"] td.err').textContent`), "with its error")

	// At phone width, in dark mode: nothing wider than the screen but the tables' scrollers, and
	// a dark background with light text.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), colorScheme("dark"),
		chromedp.Sleep(300*time.Millisecond)))
	assert.LessOrEqual(t, eval[int](t, ctx, `document.documentElement.scrollWidth`), 390, "no sideways scrolling at phone width")
	bg := eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`)
	assert.Equal(t, "rgb(17, 20, 24)", bg, "dark mode's background")
	screenshot(t, ctx, "console-phone-dark")
}
