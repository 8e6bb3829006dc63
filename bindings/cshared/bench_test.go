package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkPythonIdentity measures a Python identity model served by the library in a python3
// process (python/bench_server.py) against the built-in Go identity_fp32 in the same gateway,
// over KServe REST, at 1 and 16 concurrent clients. Metrics: µs per request of each (wall time
// over requests, so at c=16 the inverse of throughput), their ratio, and the cost of calling the
// Python function directly, as the Python process measured it.
func BenchmarkPythonIdentity(b *testing.B) {
	hello := startPythonHost(b)
	body := `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}`
	for _, c := range []int{1, 16} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}}
			run := func(model string) time.Duration {
				url := "http://" + hello.Addr + "/v2/models/" + model + "/infer"
				var wg sync.WaitGroup
				start := time.Now()
				for w := 0; w < c; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < b.N; i += c {
							res, err := client.Post(url, "application/json", strings.NewReader(body))
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.Copy(io.Discard, res.Body)
							res.Body.Close()
							if res.StatusCode != 200 {
								b.Errorf("%s: status %d", model, res.StatusCode)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(start)
			}
			b.ResetTimer()
			goT := run("identity_fp32")
			pyT := run("py_identity")
			b.StopTimer()
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(us(goT), "go_µs/req")
			b.ReportMetric(us(pyT), "py_µs/req")
			b.ReportMetric(us(pyT)/us(goT), "py/go")
			b.ReportMetric(hello.DirectUS, "direct_µs/call")
		})
	}
}

// pythonHost is what python/bench_server.py prints once it serves.
type pythonHost struct {
	Addr     string  `json:"addr"`
	DirectUS float64 `json:"direct_us"`
}

// startPythonHost runs python/bench_server.py (Python models in a python3 process hosting the
// library) until tb ends.
func startPythonHost(tb testing.TB) pythonHost {
	tb.Helper()
	python, lib, root := buildLibrary(tb)
	cmd := exec.Command(python, filepath.Join(root, "python", "bench_server.py"))
	cmd.Env = append(os.Environ(), "INFERGATE_LIB="+lib, "PYTHONPATH="+filepath.Join(root, "python"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	var hello pythonHost
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &hello) != nil {
		tb.Fatalf("python host: %v %q", err, line)
	}
	return hello
}
