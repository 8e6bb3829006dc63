package tracing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MaxSettingsBody bounds a settings request body: Triton's settings are a handful of short
// values.
const MaxSettingsBody = 64 << 10

// maxSettings bounds the names one settings request may carry.
const maxSettings = 64

// ParseTraceJSON reads the body of POST /v2[/models/{m}]/trace/setting: an object whose values
// are a string, an array of strings, or null (clear the setting); a number is read as its
// decimal text. The result is TraceSetting's map, for Update.
func ParseTraceJSON(body []byte) (map[string][]string, error) {
	raw, err := object(body, "trace setting")
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(raw))
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		switch {
		case isNull(v):
			out[k] = []string{}
		case len(v) > 0 && v[0] == '[':
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, fmt.Errorf("expect string or array of strings for '%s'", k)
			}
			if len(list) > maxSettingValues {
				return nil, fmt.Errorf("expect at most %d values for '%s'", maxSettingValues, k)
			}
			vals := make([]string, 0, len(list))
			for _, e := range list {
				s, ok := scalar(e)
				if !ok {
					return nil, fmt.Errorf("expect string or array of strings for '%s'", k)
				}
				vals = append(vals, s)
			}
			out[k] = vals
		default:
			s, ok := scalar(v)
			if !ok {
				return nil, fmt.Errorf("expect string or array of strings for '%s'", k)
			}
			out[k] = []string{s}
		}
	}
	return out, nil
}

// scalar is a JSON string's value, or a number's text.
func scalar(v json.RawMessage) (string, bool) {
	if isNull(v) {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), true
	}
	return "", false
}

// ParseLogJSON reads the body of POST /v2/logging: an object of booleans, non-negative integers
// and strings, as LogSettings' oneof.
func ParseLogJSON(body []byte) (map[string]LogValue, error) {
	raw, err := object(body, "log setting")
	if err != nil {
		return nil, err
	}
	out := make(map[string]LogValue, len(raw))
	for k, v := range raw {
		var b bool
		var s string
		var n json.Number
		switch {
		case isNull(v):
			return nil, fmt.Errorf("expect boolean, integer or string for '%s'", k)
		case json.Unmarshal(v, &b) == nil:
			out[k] = LogValue{Bool: &b}
		case json.Unmarshal(v, &s) == nil:
			out[k] = LogValue{String: &s}
		case json.Unmarshal(v, &n) == nil:
			u, err := strconv.ParseUint(n.String(), 10, 32)
			if err != nil || u > math.MaxUint32 {
				return nil, fmt.Errorf("expect int32 for '%s'", k)
			}
			u32 := uint32(u)
			out[k] = LogValue{Uint32: &u32}
		default:
			return nil, fmt.Errorf("expect boolean, integer or string for '%s'", k)
		}
	}
	return out, nil
}

// object decodes a settings body's top-level object, bounded in names.
func object(body []byte, what string) (map[string]json.RawMessage, error) {
	if len(body) > MaxSettingsBody {
		return nil, fmt.Errorf("the %s request body exceeds %d bytes", what, MaxSettingsBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("failed to parse the %s request JSON buffer: %v at %d", what, se, se.Offset)
		}
		return nil, fmt.Errorf("failed to parse the %s request JSON buffer: %v", what, err)
	}
	if len(raw) > maxSettings {
		return nil, fmt.Errorf("the %s request has %d settings; at most %d are accepted", what, len(raw), maxSettings)
	}
	return raw, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
