package vllmsim

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// params are a request's kv_transfer_params, member by member, read leniently: their shape
// changes across vLLM versions, and what a malformed member means depends on the role.
type params map[string]json.RawMessage

// parseParams reads kv_transfer_params: nil when absent or null.
func parseParams(raw json.RawMessage) (params, *apiError) {
	var p params
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if json.Unmarshal(raw, &p) != nil {
			return nil, &apiError{status: http.StatusBadRequest, msg: "kv_transfer_params must be an object", param: "kv_transfer_params"}
		}
	}
	return p, nil
}

// given reports whether p has key with a value other than null.
func (p params) given(key string) bool {
	v, ok := p[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (p params) isTrue(key string) bool {
	var b bool
	return p.given(key) && json.Unmarshal(p[key], &b) == nil && b
}

// str is p's non-empty string member key; ok is false when it is missing, null or not one.
func (p params) str(key string) (string, bool) {
	var s string
	return s, p.given(key) && json.Unmarshal(p[key], &s) == nil && s != ""
}

func (p params) port() (int, bool) {
	var n int
	return n, p.given("remote_port") && json.Unmarshal(p["remote_port"], &n) == nil && n >= 0 && n <= 65535
}

// blockIDs are remote_block_ids, one list per KV-cache group as vLLM writes them now, or the
// flat list of older releases; ok is false when there are none.
func (p params) blockIDs() ([]int, bool) {
	if !p.given("remote_block_ids") {
		return nil, false
	}
	var groups [][]int
	if json.Unmarshal(p["remote_block_ids"], &groups) != nil {
		var flat []int
		if json.Unmarshal(p["remote_block_ids"], &flat) != nil {
			return nil, false
		}
		groups = [][]int{flat}
	}
	var ids []int
	for _, g := range groups {
		ids = append(ids, g...)
	}
	return ids, len(ids) > 0
}

// namesUnknownSource reports params that name a KV source (remote_engine_id, remote_host,
// remote_port) that is no engine on the server's Fabric: a prefill engine's params always name
// itself, so such a source was made up by a client. Params that lack some of the members (a
// gateway's mistake, which vLLM answers by recomputing) are judged on those they have.
func (s *Server) namesUnknownSource(p params) bool {
	if !p.given("remote_engine_id") && !p.given("remote_host") && !p.given("remote_port") {
		return false
	}
	if s.cfg.Fabric == nil {
		return true
	}
	var engine, host *string
	var port *int
	if p.given("remote_engine_id") {
		e, ok := p.str("remote_engine_id")
		if !ok {
			return true
		}
		engine = &e
	}
	if p.given("remote_host") {
		h, ok := p.str("remote_host")
		if !ok {
			return true
		}
		host = &h
	}
	if p.given("remote_port") {
		n, ok := p.port()
		if !ok {
			return true
		}
		port = &n
	}
	return !s.cfg.Fabric.known(engine, host, port)
}

// disaggregation applies the server's role to a request's kv_transfer_params: a prefill server
// takes only remote-decode requests; a decode server pulls the KV the params name, recomputes
// when it cannot use them, and refuses them when they name a transfer that is not held. The pull
// happens on arrival, before the request waits for a slot, as if vLLM's lease on the transfer
// were kept alive while it waits.
func (s *Server) disaggregation(j *job, p params) *apiError {
	switch s.cfg.Role {
	case RolePrefill:
		// vLLM's prefill engine would serve these, uselessly or wrongly; refusing them makes a
		// gateway's broken first leg fail its test.
		switch {
		case !p.isTrue("do_remote_decode"):
			return badRequest("this prefill engine serves only remote decodes: kv_transfer_params.do_remote_decode must be true")
		case j.stream:
			return badRequest("a prefill request must not stream (stream must be false)")
		case j.maxTokens != 1:
			return badRequest("a prefill request generates one token (max_tokens must be 1, got %d)", j.maxTokens)
		}
	case RoleDecode:
		if !p.isTrue("do_remote_prefill") {
			s.count(func(st *Stats) { st.LocalPrefills++ })
			return nil
		}
		engine, okEngine := p.str("remote_engine_id")
		request, okRequest := p.str("remote_request_id")
		host, okHost := p.str("remote_host")
		port, okPort := p.port()
		ids, okIDs := p.blockIDs()
		if !okEngine || !okRequest || !okHost || !okPort || !okIDs {
			// vLLM: "Got invalid KVTransferParams ... This request will not utilize KVTransfer".
			s.count(func(st *Stats) { st.Recomputed++ })
			return nil
		}
		if !s.cfg.Fabric.known(&engine, &host, &port) {
			return badRequest("KV transfer failed: no engine %s at %s:%d", engine, host, port)
		}
		t, err := s.cfg.Fabric.pull(engine, request, ids)
		if err != nil {
			return badRequest("KV transfer failed: %v", err)
		}
		j.pull = t
		s.count(func(st *Stats) { st.TransfersPulled++ })
	}
	return nil
}
