package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// maxCreateBody bounds POST /v1/sessions' body, which holds a model name and a TTL.
const maxCreateBody = 64 << 10

// Handler serves the sessions API, to be mounted at /v1/sessions and /v1/sessions/:
//
//	POST   /v1/sessions       {"model": "...", "ttl_seconds": n}  -> 201, the session
//	GET    /v1/sessions/{id}  -> the session and its messages
//	DELETE /v1/sessions/{id}  -> {"id": ..., "object": "chat.session.deleted", "deleted": true}
//
// The caller is the one Options.Owner finds in the request's context (the gateway's API key
// check runs first). Every error is OpenAI's error object.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, http.MethodPost)
			return
		}
		m.create(w, r)
	})
	mux.HandleFunc("/v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			m.get(w, r)
		case http.MethodDelete:
			m.delete(w, r)
		default:
			methodNotAllowed(w, r, "GET, DELETE")
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		pipeline.NotFound("", "not_found", fmt.Sprintf("No such path: %s.", httpapi.Truncate(r.URL.Path, 256))).Write(w)
	})
	return mux
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	(&pipeline.Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
		Message: fmt.Sprintf("%s is not allowed on %s; use %s.", r.Method, httpapi.Truncate(r.URL.Path, 256), allow)}).Write(w)
}

// sessionObject is a session as the API shows it.
type sessionObject struct {
	ID       string             `json:"id"`
	Object   string             `json:"object"`
	Model    string             `json:"model"`
	Created  int64              `json:"created_at"`
	Expires  int64              `json:"expires_at"`
	Messages *[]json.RawMessage `json:"messages,omitempty"` // only GET shows them
}

func object(s *Session, withMessages bool) sessionObject {
	o := sessionObject{ID: s.ID, Object: "chat.session", Model: s.Model, Created: s.Created.Unix(), Expires: s.Expires.Unix()}
	if withMessages {
		msgs := s.Messages
		if msgs == nil {
			msgs = []json.RawMessage{}
		}
		o.Messages = &msgs
	}
	return o
}

// createRequest is POST /v1/sessions' body.
type createRequest struct {
	Model string          `json:"model"`
	TTL   json.RawMessage `json:"ttl_seconds"`
}

func (m *Manager) create(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			pipeline.TooLarge(tooBig.Limit).Write(w)
			return
		}
		pipeline.InvalidRequest("", "", "Could not read the request body: "+err.Error()).Write(w)
		return
	}
	req, perr := parseCreate(body)
	if perr != nil {
		perr.Write(w)
		return
	}
	if m.opts.Visible != nil && !m.opts.Visible(ctx, req.Model) {
		pipeline.ModelNotFound(req.Model).Write(w)
		return
	}
	mo, ok := m.models[req.Model]
	if !ok {
		pipeline.InvalidRequest("model", "sessions_not_enabled", fmt.Sprintf(
			"Model `%s` has no chat sessions.", httpapi.Truncate(req.Model, 256))).Write(w)
		return
	}
	ttl := mo.TTL
	if req.TTL != nil {
		var secs int64
		if json.Unmarshal(req.TTL, &secs) != nil || secs < 1 || time.Duration(secs) > mo.TTL/time.Second {
			pipeline.InvalidRequest("ttl_seconds", "invalid_value", fmt.Sprintf(
				"ttl_seconds must be a whole number of seconds from 1 to %d.", int64(mo.TTL/time.Second))).Write(w)
			return
		}
		ttl = time.Duration(secs) * time.Second
	}
	now := m.opts.Now()
	s := &Session{ID: NewID(), Owner: m.opts.Owner(ctx), Model: req.Model, Created: now, Expires: now.Add(ttl), TTL: ttl}
	if err := m.opts.Store.Create(ctx, s); err != nil {
		writeErr(w, m.storeError(ctx, "create", s.ID, err))
		return
	}
	m.m.created.WithLabelValues(s.Model).Inc()
	w.Header().Set("Location", "/v1/sessions/"+s.ID)
	httpapi.WriteJSON(w, http.StatusCreated, object(s, false))
}

// parseCreate reads POST /v1/sessions' body.
func parseCreate(body []byte) (createRequest, *pipeline.Error) {
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, pipeline.InvalidJSON(err)
	}
	if req.Model == "" {
		return req, pipeline.MissingModel()
	}
	if string(req.TTL) == "null" {
		req.TTL = nil
	}
	return req, nil
}

func writeErr(w http.ResponseWriter, err error) {
	var e *pipeline.Error
	if errors.As(err, &e) {
		e.Write(w)
		return
	}
	pipeline.ServerError(http.StatusInternalServerError, "", err.Error()).Write(w)
}

func (m *Manager) get(w http.ResponseWriter, r *http.Request) {
	ctx, id := r.Context(), r.PathValue("id")
	if !ValidID(id) {
		notFound(id).Write(w)
		return
	}
	s, err := m.opts.Store.Get(ctx, m.opts.Owner(ctx), id)
	if err != nil {
		writeErr(w, m.storeError(ctx, "get", id, err))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, object(s, true))
}

func (m *Manager) delete(w http.ResponseWriter, r *http.Request) {
	ctx, id := r.Context(), r.PathValue("id")
	if !ValidID(id) {
		notFound(id).Write(w)
		return
	}
	model, err := m.opts.Store.Delete(ctx, m.opts.Owner(ctx), id)
	if err != nil {
		writeErr(w, m.storeError(ctx, "delete", id, err))
		return
	}
	m.m.deleted.WithLabelValues(model).Inc()
	httpapi.WriteJSON(w, http.StatusOK, struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "chat.session.deleted", true})
}
