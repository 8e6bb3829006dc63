package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// record is a session as the Redis store keeps it (one JSON value).
type record struct {
	ID       string            `json:"id"`
	Owner    string            `json:"owner"`
	Model    string            `json:"model"`
	Created  int64             `json:"created_ms"`
	Expires  int64             `json:"expires_ms"`
	TTL      int64             `json:"ttl_ms"`
	Endpoint string            `json:"endpoint,omitempty"`
	Messages []json.RawMessage `json:"messages"`
}

// maxStoredMessages bounds the messages a decoded value may hold, whatever the models' own
// bounds (ModelOptions.MaxMessages, at most this).
const maxStoredMessages = 1 << 16

func encodeSession(s *Session) ([]byte, error) {
	msgs := s.Messages
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	b, err := json.Marshal(record{ID: s.ID, Owner: s.Owner, Model: s.Model, Created: s.Created.UnixMilli(),
		Expires: s.Expires.UnixMilli(), TTL: s.TTL.Milliseconds(), Endpoint: s.Endpoint, Messages: msgs})
	if err != nil {
		return nil, fmt.Errorf("sessions: encode session: %w", err)
	}
	return b, nil
}

// decodeSession reads a stored value, which comes from outside the process (Redis): it is
// checked before it is trusted, its size first.
func decodeSession(b []byte, maxBytes int) (*Session, error) {
	if len(b) > maxBytes {
		return nil, fmt.Errorf("sessions: stored session of %d bytes is over the bound of %d", len(b), maxBytes)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sessions: decode stored session: %w", err)
	}
	switch {
	case !ValidID(r.ID):
		return nil, errors.New("sessions: stored session has no valid id")
	case r.Model == "":
		return nil, errors.New("sessions: stored session names no model")
	case r.TTL <= 0:
		return nil, errors.New("sessions: stored session has no TTL")
	case len(r.Messages) > maxStoredMessages:
		return nil, fmt.Errorf("sessions: stored session has %d messages, over %d", len(r.Messages), maxStoredMessages)
	}
	for i, m := range r.Messages {
		if len(m) == 0 || m[0] != '{' {
			return nil, fmt.Errorf("sessions: stored message %d is not an object", i)
		}
	}
	return &Session{ID: r.ID, Owner: r.Owner, Model: r.Model, Created: time.UnixMilli(r.Created),
		Expires: time.UnixMilli(r.Expires), TTL: time.Duration(r.TTL) * time.Millisecond,
		Endpoint: r.Endpoint, Messages: r.Messages}, nil
}
