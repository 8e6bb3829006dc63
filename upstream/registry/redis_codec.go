package registry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"google.golang.org/protobuf/proto"
)

// RedisStore's change notifications are pub/sub messages built by its Lua scripts:
//
//	<op><seq>:<lease id>:<payload>
//
// op is '+' (added), '~' (updated) or '-' (removed); seq is the registry's change counter after
// the change (decimal); payload is the backend as protobuf bytes (empty for '-'). Lease ids are
// hex (validLeaseID), so the first two ':' delimit the fields and the payload is the rest.
type change struct {
	op      byte
	seq     int64
	leaseID string
	payload string
}

// parseChange decodes a notification. Anything with access to the Redis server can publish on
// the channel, so every field is checked.
func parseChange(msg string) (change, error) {
	if len(msg) < 2 {
		return change{}, errors.New("registry: change message too short")
	}
	c := change{op: msg[0]}
	switch c.op {
	case '+', '~', '-':
	default:
		return change{}, fmt.Errorf("registry: change message has unknown op %q", c.op)
	}
	seq, rest, ok := strings.Cut(msg[1:], ":")
	if !ok {
		return change{}, errors.New("registry: change message has no sequence number")
	}
	// Strictly as Lua's %d writes it: digits, no sign, no leading zero.
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n <= 0 || seq[0] < '1' || seq[0] > '9' {
		return change{}, fmt.Errorf("registry: change message has bad sequence number %q", seq)
	}
	c.seq = n
	id, payload, ok := strings.Cut(rest, ":")
	if !ok || !validLeaseID(id) {
		return change{}, errors.New("registry: change message has no valid lease id")
	}
	c.leaseID, c.payload = id, payload
	if c.op == '-' && payload != "" {
		return change{}, errors.New("registry: removal message has a payload")
	}
	return c, nil
}

// encodeChange is parseChange's inverse, for tests; the Lua scripts build the real messages.
func encodeChange(c change) string {
	return string(c.op) + strconv.FormatInt(c.seq, 10) + ":" + c.leaseID + ":" + c.payload
}

// decodeBackend decodes a stored backend and checks it as Register does: what is in Redis is
// not trusted more than what a client sends.
func decodeBackend(payload string) (*registryv1.Backend, error) {
	b := new(registryv1.Backend)
	if err := proto.Unmarshal([]byte(payload), b); err != nil {
		return nil, fmt.Errorf("registry: stored backend is not a registry.v1.Backend: %w", err)
	}
	if err := ValidateBackend(b); err != nil {
		return nil, fmt.Errorf("registry: stored backend is invalid: %w", err)
	}
	return b, nil
}

func encodeBackend(b *registryv1.Backend) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(b)
}
