package olla

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
)

// Olla's model catalogue (/olla/models and its ?format variants, /olla/models/{id}) built from the
// pool's routing table: one entry per public model name, with the endpoints serving it. Olla
// merges its backends' native listings (Ollama's details, LM Studio's states) into families,
// sizes and quantizations; infergate reads OpenAI's /v1/models from every backend, so those
// fields are empty, and max_context_length comes from vLLM's max_model_len where a backend reports
// it.

// catalogEntry is one model as the catalogue sees it.
type catalogEntry struct {
	name    string
	routes  []openaipool.Route
	healthy bool
	maxLen  int64 // max_model_len, 0 unknown
	ownedBy string
	types   []string // endpoint types serving it, sorted
}

// formats are Olla's ?format values; the vLLM-like ones share vLLM's shape.
var formats = []string{"unified", "openai", "ollama", "lmstudio", "vllm", "sglang", "lmdeploy", "llamacpp", "lemonade", "vllm-mlx", "docker-model-runner"}

// catalog reads the table: the models the caller may see, those with a healthy endpoint unless
// includeUnavailable, only those served by the named endpoint when endpoint is set.
func (o *routes) catalog(r *http.Request, includeUnavailable bool, endpoint string) []catalogEntry {
	var out []catalogEntry
	for _, m := range o.p.Routes(r.Context()) {
		e := catalogEntry{name: m.Name, routes: m.Routes}
		for _, rt := range m.Routes {
			e.healthy = e.healthy || rt.Healthy
			if !slices.Contains(e.types, rt.Type) {
				e.types = append(e.types, rt.Type)
			}
			var entry struct {
				MaxModelLen int64  `json:"max_model_len"`
				OwnedBy     string `json:"owned_by"`
			}
			if json.Unmarshal(rt.Entry, &entry) == nil {
				e.maxLen = max(e.maxLen, entry.MaxModelLen)
				if e.ownedBy == "" {
					e.ownedBy = entry.OwnedBy
				}
			}
		}
		slices.Sort(e.types)
		if !e.healthy && !includeUnavailable {
			continue
		}
		if endpoint != "" && !slices.ContainsFunc(m.Routes, func(rt openaipool.Route) bool { return rt.Endpoint == endpoint }) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// availability is Olla's per-endpoint state of a model: infergate knows only whether the
// endpoint serving it is healthy.
func availability(e catalogEntry) []map[string]string {
	out := make([]map[string]string, 0, len(e.routes))
	for _, rt := range e.routes {
		state := "unknown"
		if rt.Healthy {
			state = "available"
		}
		out = append(out, map[string]string{"endpoint": rt.Endpoint, "state": state})
	}
	return out
}

// capabilities are Olla's words for what a model does, as far as its name and context say.
func capabilities(e catalogEntry) []string {
	name := strings.ToLower(e.name)
	if strings.Contains(name, "embed") {
		return []string{"embeddings", "similarity", "vector-search"}
	}
	c := []string{"text-generation", "chat", "completion"}
	if strings.Contains(name, "code") || strings.Contains(name, "coder") {
		c = append(c, "code-generation", "programming")
	}
	if strings.Contains(name, "instruct") {
		c = append(c, "instruction-following")
	}
	switch {
	case e.maxLen >= 1_000_000:
		c = append(c, "ultra-long-context")
	case e.maxLen >= 100_000:
		c = append(c, "long-context")
	case e.maxLen >= 32_000:
		c = append(c, "extended-context")
	}
	return c
}

// ollaModels is /olla/models: the catalogue in Olla's unified format (the default) or another
// (?format=), filtered as Olla's query parameters say.
func (o *routes) ollaModels(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "unified"
	}
	if !slices.Contains(formats, format) {
		http.Error(w, "invalid query parameter format="+format+": unsupported format. Supported formats: "+strings.Join(formats, ", "), http.StatusBadRequest)
		return
	}
	avail := q.Get("available")
	if avail != "" && avail != "true" && avail != "false" {
		http.Error(w, "invalid query parameter available="+avail+": must be true or false", http.StatusBadRequest)
		return
	}
	models := o.catalog(r, q.Get("include_unavailable") == "true", q.Get("endpoint"))
	if avail != "" {
		models = slices.DeleteFunc(models, func(e catalogEntry) bool { return e.healthy != (avail == "true") })
	}
	now := time.Now()
	switch format {
	case "unified":
		data := make([]map[string]any, 0, len(models))
		for _, e := range models {
			block := map[string]any{"family": "", "variant": "", "parameter_size": "", "quantization": "",
				"aliases": []string{e.name}, "availability": availability(e), "capabilities": capabilities(e)}
			if e.maxLen > 0 {
				block["max_context_length"] = e.maxLen
			}
			var eps []string
			for _, rt := range e.routes {
				if rt.Healthy {
					eps = append(eps, rt.Endpoint)
				}
			}
			data = append(data, map[string]any{"id": e.name, "object": "model", "owned_by": "olla", "created": now.Unix(),
				"olla": block, "providers": e.types, "endpoints": nonNil(eps)})
		}
		writeCompact(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case "openai":
		data := make([]map[string]any, 0, len(models))
		for _, e := range models {
			data = append(data, map[string]any{"id": e.name, "object": "model", "owned_by": "olla", "created": now.Unix()})
		}
		writeCompact(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case "ollama":
		writeCompact(w, http.StatusOK, map[string]any{"models": ollamaList(models, now)})
	case "lmstudio":
		writeCompact(w, http.StatusOK, map[string]any{"object": "list", "data": lmstudioList(models)})
	default: // vLLM and its relatives
		data := make([]map[string]any, 0, len(models))
		for _, e := range models {
			owner := "vllm"
			if org, _, ok := strings.Cut(e.name, "/"); ok {
				owner = org
			}
			m := map[string]any{"id": e.name, "object": "model", "created": now.Unix(), "owned_by": owner, "root": e.name,
				"permission": []map[string]any{{"id": "modelperm-olla-" + e.name, "object": "model_permission", "created": now.Unix(),
					"allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true, "allow_search_indices": false,
					"allow_view": true, "allow_fine_tuning": false, "organization": "*", "group": nil, "is_blocking": false}}}
			if e.maxLen > 0 {
				m["max_model_len"] = e.maxLen
			}
			data = append(data, m)
		}
		writeCompact(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}
}

// ollamaList is models in Ollama's /api/tags shape: only those an Ollama endpoint serves.
func ollamaList(models []catalogEntry, now time.Time) []map[string]any {
	out := []map[string]any{}
	for _, e := range models {
		if !slices.Contains(e.types, upstream.TypeOllama) {
			continue
		}
		out = append(out, map[string]any{"name": e.name, "model": e.name, "modified_at": now.UTC().Format(time.RFC3339),
			"digest": "", "size": 0, "details": map[string]string{"family": "", "parameter_size": "", "quantization_level": ""}})
	}
	return out
}

// lmstudioList is models in LM Studio's /api/v0/models shape: only those an LM Studio endpoint
// serves.
func lmstudioList(models []catalogEntry) []map[string]any {
	out := []map[string]any{}
	for _, e := range models {
		if !slices.Contains(e.types, upstream.TypeLMStudio) {
			continue
		}
		state := "not-loaded"
		if e.healthy {
			state = "loaded"
		}
		m := map[string]any{"id": e.name, "object": "model", "type": "llm", "state": state}
		if e.maxLen > 0 {
			m["max_context_length"] = e.maxLen
		}
		out = append(out, m)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ollaModel is /olla/models/{id}: one model's summary in Olla's shape, looked up by name in any
// case. Olla reads only the first path segment; infergate takes the whole rest of the path, so
// Hugging Face style names (org/model) are found too.
func (o *routes) ollaModel(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" {
		http.Error(w, "Model ID or alias required", http.StatusBadRequest)
		return
	}
	for _, e := range o.catalog(r, true, "") {
		if !strings.EqualFold(e.name, id) {
			continue
		}
		eps, loaded := []string{}, []string{}
		for _, rt := range e.routes {
			eps = append(eps, rt.Endpoint)
			if rt.Healthy {
				loaded = append(loaded, rt.Endpoint)
			}
		}
		m := map[string]any{"id": e.name, "family": "", "variant": "", "parameter_size": "", "quantization": "", "format": "",
			"total_disk_size": size(0), "last_seen": "unknown", "aliases": []string{e.name}, "endpoints": eps,
			"loaded_endpoints": loaded, "capabilities": capabilities(e), "parameter_count": 0}
		if e.maxLen > 0 {
			m["max_context_length"] = e.maxLen
		}
		writeCompact(w, http.StatusOK, m)
		return
	}
	http.Error(w, "Model not found", http.StatusNotFound)
}
