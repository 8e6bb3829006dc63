package anthropic

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WrapModels wraps the gateway's GET /v1/models and GET /v1/models/{model} handler: a request
// from an Anthropic client (LooksAnthropic) gets the list, or the one model, in Anthropic's
// shape ({"data":[{"type":"model","id","display_name","created_at"}],"has_more","first_id",
// "last_id"}, paged by limit, after_id and before_id as Anthropic's API pages it); any other
// request goes to the handler untouched. Errors come back in Anthropic's shape.
func WrapModels(openAIModels http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LooksAnthropic(r) {
			openAIModels.ServeHTTP(w, r)
			return
		}
		rec := &recorder{h: make(http.Header)}
		openAIModels.ServeHTTP(rec, r)
		reqID := rec.h.Get("X-Request-Id")
		if reqID == "" {
			reqID = r.Header.Get("X-Request-Id")
		}
		for k, vv := range rec.h {
			if k != "Content-Length" && k != "Content-Type" {
				w.Header()[k] = vv
			}
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if rec.status != http.StatusOK {
			cw := &chatWriter{w: w, h: rec.h, status: rec.status, buf: rec.buf, reqID: reqID}
			cw.upstreamError()
			return
		}
		if rec.over {
			(&apiError{status: http.StatusBadGateway, typ: "api_error", msg: "The model list is too large."}).write(w, reqID)
			return
		}
		var body []byte
		var err *apiError
		if strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/v1/models") {
			body, err = modelList(rec.buf, r.URL.Query())
		} else {
			var m openAIModel
			if json.Unmarshal(rec.buf, &m) != nil || m.ID == "" {
				err = badUpstream("The model entry is not an OpenAI model object.")
			} else {
				body = appendModel(nil, &m)
			}
		}
		if err != nil {
			err.write(w, reqID)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}

type openAIModel struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
}

func appendModel(b []byte, m *openAIModel) []byte {
	b = append(b, `{"type":"model","id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"display_name":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"created_at":`...)
	b = appendString(b, time.Unix(m.Created, 0).UTC().Format(time.RFC3339))
	return append(b, '}')
}

// modelList translates OpenAI's model list and pages it: limit (1 to 1000, default 20) models
// after after_id, or before before_id, in the list's order.
func modelList(body []byte, q map[string][]string) ([]byte, *apiError) {
	var list struct {
		Data []openAIModel `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, badUpstream("The model list is not OpenAI's: " + err.Error())
	}
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	limit := 20
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return nil, invalid("limit: Input should be an integer between 1 and 1000")
		}
		limit = n
	}
	data := list.Data
	find := func(id string) int {
		for i := range data {
			if data[i].ID == id {
				return i
			}
		}
		return -1
	}
	hasMore := false
	switch after, before := get("after_id"), get("before_id"); {
	case after != "" && before != "":
		return nil, invalid("after_id and before_id cannot both be set")
	case before != "":
		i := find(before)
		if i < 0 {
			i = 0 // an unknown cursor names nothing to page from
		}
		data = data[:i]
		if len(data) > limit {
			data, hasMore = data[len(data)-limit:], true
		}
	default:
		if after != "" {
			if i := find(after); i < 0 {
				data = nil
			} else {
				data = data[i+1:]
			}
		}
		if len(data) > limit {
			data, hasMore = data[:limit], true
		}
	}
	b := append(make([]byte, 0, 64+len(data)*96), `{"data":[`...)
	for i := range data {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, &data[i])
	}
	b = append(b, `],"has_more":`...)
	b = appendBool(b, hasMore)
	b = append(b, `,"first_id":`...)
	if len(data) > 0 {
		b = appendString(b, data[0].ID)
		b = append(b, `,"last_id":`...)
		b = appendString(b, data[len(data)-1].ID)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	return append(b, '}'), nil
}

// recorder holds an answer, bounded.
type recorder struct {
	h      http.Header
	status int
	buf    []byte
	over   bool
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if len(r.buf)+len(p) > maxAnswer {
		r.over = true
		return len(p), nil
	}
	r.buf = append(r.buf, p...)
	return len(p), nil
}
