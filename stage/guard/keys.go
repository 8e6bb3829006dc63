package guard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Principal is the caller an API key identifies.
type Principal struct {
	// Name identifies the key in logs, metrics and rate-limit keys; never the secret itself.
	Name string `json:"name"`
	// Models lists the models the key may use; empty means every model.
	Models []string `json:"models,omitempty"`
	// Admin keys may do everything: register backends, read the admin endpoint, load and unload
	// models, and see every tenant's batches.
	Admin bool `json:"admin,omitempty"`
	// Control keys may load and unload the models they may use (KServe's repository extension),
	// which changes those models for every caller.
	Control bool `json:"control,omitempty"`
}

// MayUse reports whether the principal may call model, and see it: a model outside the key's
// list is, to that key, a model that does not exist.
func (p *Principal) MayUse(model string) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, model)
}

// MayControl reports whether the principal may load and unload models.
func (p *Principal) MayControl() bool { return p.Admin || p.Control }

// ErrUnknownKey is what a KeyStore answers for a secret it does not know.
var ErrUnknownKey = errors.New("unknown API key")

// KeyStore finds the principal of a presented secret. Implementations keep only hashes (HashKey)
// of the secrets, never the secrets themselves.
type KeyStore interface {
	Lookup(ctx context.Context, secret string) (*Principal, error)
}

// HashKey is how keys are kept at rest: the SHA-256 of the secret, in hex. API keys are long
// random strings, so a fast unsalted hash is enough to keep a leaked config or Redis dump from
// revealing them.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// KeyConfig is one API key in the config file.
type KeyConfig struct {
	Name string `yaml:"name"`
	// SHA256 is HashKey of the secret: `printf %s "$KEY" | sha256sum`.
	SHA256 string   `yaml:"sha256"`
	Models []string `yaml:"models"`
	Admin  bool     `yaml:"admin"`
	// Control lets the key load and unload its models.
	Control bool `yaml:"control"`
}

// StaticKeys is a KeyStore of keys listed in the config.
type StaticKeys struct {
	byHash map[string]*Principal
}

// NewStaticKeys checks and indexes the configured keys: names and hashes must be unique, and
// each hash 64 hex digits.
func NewStaticKeys(keys []KeyConfig) (*StaticKeys, error) {
	s := &StaticKeys{byHash: make(map[string]*Principal, len(keys))}
	names := map[string]bool{}
	var errs []error
	for i, k := range keys {
		h := strings.ToLower(k.SHA256)
		switch {
		case k.Name == "":
			errs = append(errs, fmt.Errorf("keys[%d]: name is required", i))
		case names[k.Name]:
			errs = append(errs, fmt.Errorf("keys[%d]: duplicate name %q", i, k.Name))
		}
		names[k.Name] = true
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("keys[%d] (%s): sha256 must be 64 hex digits (printf %%s \"$KEY\" | sha256sum)", i, k.Name))
			continue
		}
		if _, dup := s.byHash[h]; dup {
			errs = append(errs, fmt.Errorf("keys[%d] (%s): the same key is listed twice", i, k.Name))
			continue
		}
		s.byHash[h] = &Principal{Name: k.Name, Models: k.Models, Admin: k.Admin, Control: k.Control}
	}
	return s, errors.Join(errs...)
}

// Lookup implements KeyStore.
func (s *StaticKeys) Lookup(_ context.Context, secret string) (*Principal, error) {
	if p, ok := s.byHash[HashKey(secret)]; ok {
		return p, nil
	}
	return nil, ErrUnknownKey
}

// Len is the number of keys.
func (s *StaticKeys) Len() int { return len(s.byHash) }

type principalKey struct{}

// WithPrincipal returns ctx carrying the authenticated caller.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the authenticated caller, or nil when authentication is off.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Visible is the model registry's and the OpenAI API's view of a caller: with API keys on, a key
// sees only the models it may use; with them off (no principal) every model.
func Visible(ctx context.Context, model string) bool {
	p := PrincipalFrom(ctx)
	return p == nil || p.MayUse(model)
}
