// Package console is the operator console: GET /console, a live page of the gateway's state
// (traffic, upstreams, models, batches, API keys) served from the binary with no external asset,
// and GET /console/api/state, the JSON document the page polls, which is an API of its own
// (docs/console.md). The Recorder keeps the traffic figures in fixed memory; the rest is read
// from the gateway's parts (Sources) on each poll.
//
// The routes are behind the admin key when API keys are on (the guard's Auth treats /console as
// an admin path and accepts the key as a Basic password there, so a browser can log in); the
// page and the document show no secret: no key (keys by their configured names), no prompt, no
// upstream credential (URLs without user info or query, the config redacted by its owner).
package console

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"time"
)

//go:embed assets
var assets embed.FS

// Console serves the page and its state.
type Console struct {
	rec *Recorder
	src Sources
}

// New returns the console of rec's traffic and src's parts.
func New(rec *Recorder, src Sources) *Console {
	if src.Logger == nil {
		src.Logger = slog.Default()
	}
	return &Console{rec: rec, src: src}
}

// Mount adds the console's routes to mux: GET /console (the page), GET /console/assets/ (its
// script and style sheet) and GET /console/api/state (the JSON document).
func (c *Console) Mount(mux *http.ServeMux) {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/console/assets/", http.FileServerFS(sub))
	mux.Handle("GET /console", secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, err := assets.ReadFile("assets/index.html")
		if err != nil {
			http.Error(w, "console page missing", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})))
	mux.Handle("GET /console/assets/", secure(files))
	mux.Handle("GET /console/api/state", secure(http.HandlerFunc(c.serveState)))
}

// secure sets the headers every console answer carries: nothing from elsewhere may load (no
// CDN, no inline script), the page cannot be framed, answers are not cached (they are an admin's).
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (c *Console) serveState(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	s := c.state(ctx)
	for i := range s.Upstreams {
		s.Upstreams[i].LastError = scrubURLs(s.Upstreams[i].LastError)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if err := enc.Encode(s); err != nil {
		c.src.Logger.Debug("console: writing state", "err", err)
	}
}

var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`)

// scrubURLs rewrites the URLs in an error message as safeURL shows them: an error can quote the
// URL it failed on, user info and query (a credential's usual places) included.
func scrubURLs(s string) string {
	return urlInText.ReplaceAllStringFunc(s, safeURL)
}
