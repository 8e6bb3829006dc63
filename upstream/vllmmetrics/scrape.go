package vllmmetrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Limits bound one scrape. Zero fields take the defaults.
type Limits struct {
	// MaxBytes is the most body bytes read (after any Content-Encoding); a longer page is an
	// error, never parsed cut short. Default 4 MiB (a vLLM page with one model is about 70 KB
	// per engine core).
	MaxBytes int64
	// MaxSeries bounds the vllm: series kept (default DefaultMaxSeries).
	MaxSeries int
	// Timeout bounds the whole scrape, body included (default 2 s, the health check's).
	Timeout time.Duration
}

// Defaults for Limits.
const (
	DefaultMaxBytes = 4 << 20
	DefaultTimeout  = 2 * time.Second
)

// Scrape GETs url (a vLLM server's /metrics) with client and parses the page. Header values
// (an upstream's Authorization, say) are set on the request; nil for none.
func Scrape(ctx context.Context, client *http.Client, url string, header http.Header, lim Limits) (*Metrics, error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	if lim.Timeout <= 0 {
		lim.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("vllmmetrics: scraping %s: %w", url, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	// The text format: vLLM's prometheus_client answers it to any Accept; ask for nothing else.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vllmmetrics: scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // lets the connection be reused
		return nil, fmt.Errorf("vllmmetrics: scraping %s: status %s", url, resp.Status)
	}
	if resp.ContentLength > lim.MaxBytes {
		return nil, fmt.Errorf("vllmmetrics: scraping %s: %d bytes is more than %d", url, resp.ContentLength, lim.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, lim.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("vllmmetrics: scraping %s: reading the page: %w", url, err)
	}
	if int64(len(body)) > lim.MaxBytes {
		return nil, fmt.Errorf("vllmmetrics: scraping %s: the page is longer than %d bytes", url, lim.MaxBytes)
	}
	m, err := Parse(body, lim.MaxSeries)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	return m, nil
}
