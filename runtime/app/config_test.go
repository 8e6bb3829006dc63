package app

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/inflate"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	t.Setenv("VLLM_API_KEY", "k1")
	t.Setenv("OPENAI_API_KEY", "k2")
	c, err := LoadConfig("../infergate.example.yaml")
	require.NoError(t, err)
	require.Len(t, c.Upstreams, 4)
	assert.Equal(t, "vllm-a", c.Upstreams[0].Name)
	assert.Equal(t, 5*time.Second, c.Upstreams[0].CheckInterval)
	assert.Equal(t, "kserve", c.Upstreams[3].Type)
	assert.True(t, c.builtins())
	assert.Equal(t, "memory", c.registryStore())
	assert.Equal(t, 64, c.Batch.Concurrency)
	assert.True(t, c.Batch.worker(), "gateways run batch lines unless told not to")
	assert.Equal(t, inflate.Config{MaxBytes: 64 << 20, MaxRatio: 200, MaxInFlightBytes: 1 << 30}, c.Server.decompression())
	assert.Equal(t, 10*time.Second, c.Server.FirstByteTimeout)

	c, err = ParseConfig("empty.yaml", nil)
	require.NoError(t, err, "an empty file is the zero config")
	assert.Empty(t, c.Upstreams)

	for _, tc := range []struct{ yaml, want string }{
		{"upstream: []", "bad.yaml: yaml: unmarshal errors:\n  line 1: field upstream not found"},
		{"upstreams:\n  - name: a\n    url: http://h\n    type: vllm\n    check_interval: soon\n", "bad.yaml: yaml: unmarshal errors:\n  line 5: cannot unmarshal !!str `soon`"},
		{"upstreams:\n  - name: a\n    url: http://h\n    type: vllm\n    prio: 1\n", "line 5: field prio not found"},
		{"upstreams:\n  - name: a\n    type: vllm\n  - name: b\n    url: http://h\n", "bad.yaml: upstreams: endpoint \"a\": url: required\nbad.yaml: upstreams: endpoint \"b\": type: required"},
		{"upstreams:\n  - name: a\n    url: http://h\n    type: vllm\n    headers: {Authorization: \"Bearer ${INFERGATE_NOPE}\"}\n", "bad.yaml: upstreams: endpoint \"a\": headers.Authorization: environment variable INFERGATE_NOPE is not set"},
		{"upstreams: {", "bad.yaml: yaml:"},
		{"registry: {store: etcd}", "bad.yaml: registry.store: \"etcd\" is not one of memory, redis"},
		{"upstream_client: h2", "bad.yaml: upstream_client: \"h2\" is not one of fast, std"},
		{"registry: {store: redis}", "bad.yaml: registry.store: redis needs redis.addr"},
		{"redis: {adress: x}", "field adress not found"},
		{"batch: {concurrency: -1}", "bad.yaml: batch: counts and sizes must not be negative"},
		{"batch: {concurrency_by_model: {llama: 0}}", `bad.yaml: batch.concurrency_by_model: slots: limit for "llama" is 0, want at least 1`},
		{"batch: {kafka: {brokers: a:9092}}", "cannot unmarshal !!str `a:9092` into []string"},
		{"batch: {kafka: {brokers: [a:9092]}}", "bad.yaml: batch.kafka needs redis.addr"},
		{"server: {max_decompressed_bytes: 8589934592}", "bad.yaml: server.max_decompressed_bytes must be between 1 and 4294967295"},
		{"server: {max_decompressed_bytes: 1048576, max_decompression_in_flight_bytes: 1024}", "bad.yaml: server.max_decompression_in_flight_bytes (1024) must hold at least one body"},
		{"server: {first_byte_timeout: -1s}", "bad.yaml: server: timeouts must be positive"},
		{"server: {header_timeout: -1s}", "bad.yaml: server: timeouts must be positive"},
		{"server: {spool_dir: /no/such/dir}", `bad.yaml: server.spool_dir "/no/such/dir" is not a directory`},
		{"server: {max_spool_bytes: -1}", "bad.yaml: server.max_spool_bytes must be positive"},
	} {
		_, err := ParseConfig("bad.yaml", []byte(tc.yaml))
		require.Error(t, err, tc.yaml)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = LoadConfig("does-not-exist.yaml")
	require.ErrorContains(t, err, "does-not-exist.yaml")
}

// TestEnvOverrides: every scalar setting can come from an INFERGATE_* variable, which wins over
// the file; a value that does not parse names the variable.
func TestEnvOverrides(t *testing.T) {
	t.Setenv("INFERGATE_REDIS_ADDR", "127.0.0.1:6390")
	t.Setenv("INFERGATE_REDIS_DB", "3")
	t.Setenv("INFERGATE_BUILTIN_MODELS", "false")
	t.Setenv("INFERGATE_REGISTRY_DEFAULT_TTL", "3s")
	c, err := ParseConfig("f.yaml", []byte("redis: {addr: file:1, prefix: p}\nregistry: {default_ttl: 9s}\n"))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:6390", c.Redis.Addr, "the environment wins")
	assert.Equal(t, "p", c.Redis.Prefix, "the file's value stays where no variable is set")
	assert.Equal(t, 3, c.Redis.DB)
	assert.False(t, c.builtins())
	assert.Equal(t, 3*time.Second, c.Registry.DefaultTTL)
	assert.Equal(t, "redis", c.registryStore(), "redis.addr makes Redis the registry's default store")

	t.Setenv("INFERGATE_UPSTREAM_CLIENT", "std")
	c, err = ParseConfig("f.yaml", []byte("upstream_client: fast\n"))
	require.NoError(t, err)
	assert.Equal(t, "std", c.UpstreamClient)

	t.Setenv("INFERGATE_BATCH_KAFKA_BROKERS", "k1:9092, k2:9092,")
	c, err = ParseConfig("f.yaml", []byte("batch: {kafka: {brokers: [file:9092]}}\nredis: {addr: r:1}\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"k1:9092", "k2:9092"}, c.Batch.Kafka.Brokers, "a list from the environment is comma-separated")

	t.Setenv("INFERGATE_REDIS_DB", "three")
	_, err = ParseConfig("f.yaml", nil)
	require.ErrorContains(t, err, `f.yaml: INFERGATE_REDIS_DB="three": strconv.Atoi`)
}

// FuzzParseConfig: any bytes give a config or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("../infergate.example.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("upstreams:\n  - {name: a, url: 'http://h:1', type: ollama, priority: 3, aliases: {x: y}}\n"))
	f.Add([]byte("upstreams: [{headers: {A: '${B}'}}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig("fuzz.yaml", b)
		if err == nil && c == nil {
			t.Fatal("nil config without an error")
		}
	})
}

// TestBinaryServesOpenAIFromConfig runs the real binary with -config in front of a fake vLLM and
// checks /v1/models, a chat completion and SIGTERM during a stream.
func TestBinaryServesOpenAIFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	up := openaitest.Start(t, "fake", "llama")
	up.SetStream(10, 20*time.Millisecond)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "infergate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("upstreams:\n  - name: local\n    url: "+up.URL+
		"\n    type: vllm\n    check_interval: 100ms\n    headers: {X-Key: \"${INFERGATE_E2E_KEY}\"}\n"), 0o600))
	bin := filepath.Join(dir, "infergate")
	out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput()
	require.NoError(t, err, "%s", out)

	addr := freeAddr(t)
	cmd := exec.Command(bin, "-listen", addr, "-config", cfg, "-log-level", "warn")
	cmd.Env = append(os.Environ(), "INFERGATE_E2E_KEY=e2e")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(base + "/v1/models")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return strings.Contains(string(b), `"id":"llama"`)
	}, 30*time.Second, 50*time.Millisecond)

	res, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","messages":[]}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	assert.Equal(t, "e2e", up.LastHeader().Get("X-Key"))

	res, err = http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	require.NoError(t, err)
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	_, err = r.ReadString('\n')
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"), "the stream in flight at SIGTERM completed")
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("process did not exit after draining")
	}
}
