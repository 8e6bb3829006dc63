// Package sessions keeps chat sessions: a request to /v1/chat/completions that names a session
// (header X-Infergate-Session-Id, or body field session_id) is one turn of a stored conversation.
// The stage (Manager.Interceptor) prepends the session's history to the request's messages,
// trims the oldest turns so the prompt and max_tokens fit the model's context window, sends the
// request on, and once the answer has been read to its end without failure (streamed or not)
// stores the turn: the request's messages and the assistant's message. Sessions are created,
// read and deleted through Manager.Handler (POST /v1/sessions, GET and DELETE
// /v1/sessions/{id}).
//
// The conversation a session holds is a system prompt (the leading system and developer
// messages) and turns: a user message and everything up to the next one (the assistant's
// answer, tool calls and their results). A request that starts with system or developer
// messages replaces the session's system prompt, so clients that resend it every turn do not
// repeat it. Trimming drops whole turns, oldest first, keeping any system or developer message
// inside them; it never splits a message.
//
// A session belongs to the API key that created it (Options.Owner) and to one model. Ids the
// gateway did not make, expired ones and another key's are all the same 404, so a client cannot
// learn whether an id exists. A turn holds the session's lock from the request until its answer
// is stored; a second concurrent turn waits for it (Options.LockWait) and is then refused with
// 409 session_busy, so turns never interleave. The lock is a lease, renewed while the turn runs, so a gateway that dies mid-turn
// frees the session within one lease.
//
// State lives in a Store: Memory (one process) or Redis (replicas sharing one Redis continue
// each other's conversations). Both pass the contract in package sessionstest.
package sessions

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
)

// Session is one stored conversation.
type Session struct {
	ID    string
	Owner string // the API key's identity; "" when API keys are off
	Model string // the public model name every turn must name
	// Created and Expires are when the session was made and when it lapses unless a turn
	// refreshes it; TTL is how far each turn pushes Expires.
	Created, Expires time.Time
	TTL              time.Duration
	// Endpoint is the upstream endpoint that served the last turn, preferred for the next one
	// so its prefix cache is reused.
	Endpoint string
	// Messages are the system prompt, then the turns, as the model last saw them plus the last
	// answer: each a JSON object of OpenAI's chat message shape.
	Messages []json.RawMessage
}

// clone copies s's fields and its message list (the messages' bytes are shared: nobody
// modifies them).
func (s *Session) clone() *Session {
	c := *s
	c.Messages = append([]json.RawMessage(nil), s.Messages...)
	return &c
}

// Store keeps sessions. Every method takes the caller's owner where a client names the session,
// and treats another owner's session as absent. Errors other than the ones below mean the store
// failed (Redis unreachable): the caller answers 503, and nothing was half-written.
type Store interface {
	// Create stores s, which is new (its ID fresh, Messages empty), until s.Expires.
	Create(ctx context.Context, s *Session) error
	// Get returns owner's session id; ErrNotFound when absent, expired or another owner's.
	Get(ctx context.Context, owner, id string) (*Session, error)
	// Lock takes the turn lock of owner's session id for lease, returning the session and the
	// lock's token; ErrNotFound as Get, ErrBusy when another turn holds the lock.
	Lock(ctx context.Context, owner, id string, lease time.Duration) (*Session, string, error)
	// Renew extends the lock token holds by lease from now; ErrLockLost when token no longer
	// holds it (it expired, or the session was deleted).
	Renew(ctx context.Context, id, token string, lease time.Duration) error
	// Commit, if token still holds the lock, replaces the session's Endpoint and Messages with
	// s's, sets its expiry to s.Expires and releases the lock, all at once; ErrLockLost (nothing
	// written) when token no longer holds the lock, ErrNotFound when the session was deleted.
	Commit(ctx context.Context, id, token string, s *Session) error
	// Unlock releases the lock token holds, writing nothing; a lock no longer held is no error.
	Unlock(ctx context.Context, id, token string) error
	// Delete removes owner's session id and returns its model; ErrNotFound as Get.
	Delete(ctx context.Context, owner, id string) (model string, err error)
}

// The Store's answers that are not failures.
var (
	ErrNotFound = errors.New("sessions: no such session")
	ErrBusy     = errors.New("sessions: another turn of the session is in progress")
	ErrLockLost = errors.New("sessions: the turn's lock expired or was taken")
)

// idPrefix starts every session id; the rest is 128 random bits in unpadded base64url.
const (
	idPrefix = "sess_"
	idLen    = len(idPrefix) + 22
)

// NewID returns a fresh session id: "sess_" and 128 random bits, URL-safe.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return idPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidID reports whether id has the shape of an id NewID makes. Anything else cannot name a
// session, and is not looked up.
func ValidID(id string) bool {
	if len(id) != idLen || id[:len(idPrefix)] != idPrefix {
		return false
	}
	for i := len(idPrefix); i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// 22 base64 characters carry 132 bits: the last one's low 4 bits are 0 in a NewID id.
	return base64Val(id[len(id)-1])&0xf == 0
}

func base64Val(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c - 'A'
	case 'a' <= c && c <= 'z':
		return c - 'a' + 26
	case '0' <= c && c <= '9':
		return c - '0' + 52
	case c == '-':
		return 62
	}
	return 63
}

// newToken is a lock token: 128 random bits, so a lock cannot be released by someone else.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
