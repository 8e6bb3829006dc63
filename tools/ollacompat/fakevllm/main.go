// Command fakevllm serves a simulated vLLM server (internal/vllmsim) on a TCP address, for
// running other projects' black-box test scripts against infergate without a GPU
// (tools/ollacompat/run.sh runs Olla's). It answers /health, /v1/models, /metrics and
// /v1/completions and /v1/chat/completions, whole and streamed, token by token.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/infergate/infergate/internal/vllmsim"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:8001", "address to serve on")
	model := flag.String("model", "sim", "the served model's name")
	perToken := flag.Duration("per-token", 5*time.Millisecond, "time to generate one token (streams send each as it comes)")
	flag.Parse()
	s := vllmsim.New(vllmsim.Config{Model: *model, DecodePerToken: *perToken, MaxConcurrent: 64})
	log.Printf("fakevllm: %s on http://%s", *model, *addr)
	log.Fatal(http.ListenAndServe(*addr, s.Handler()))
}
