package registry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"google.golang.org/protobuf/proto"
)

// Limits on what a backend may register.
const (
	// MaxModelNameBytes bounds a model name.
	MaxModelNameBytes = 256
	// MaxBackendBytes bounds a serialized registration (a Triton ModelConfig included): it is
	// stored and sent to every replica.
	MaxBackendBytes = 1 << 20
)

// ValidateBackend checks a registration as a client sends it (derived fields may be unspecified)
// or as it is stored (derived fields filled in). Errors name the field and say what is wrong.
func ValidateBackend(b *registryv1.Backend) error {
	if b == nil {
		return errors.New("backend is required")
	}
	if n := proto.Size(b); n > MaxBackendBytes {
		return fmt.Errorf("backend is %d bytes; at most %d are allowed", n, MaxBackendBytes)
	}
	if err := checkModelName(b.GetModelName()); err != nil {
		return err
	}
	typ := b.GetModelType()
	tensorModel := typ == registryv1.ModelType_MODEL_TYPE_TENSOR
	switch typ {
	case registryv1.ModelType_MODEL_TYPE_CHAT, registryv1.ModelType_MODEL_TYPE_COMPLETIONS,
		registryv1.ModelType_MODEL_TYPE_EMBEDDINGS, registryv1.ModelType_MODEL_TYPE_TENSOR:
	case registryv1.ModelType_MODEL_TYPE_UNSPECIFIED:
		return errors.New("backend.model_type is required (chat, completions, embeddings or tensor)")
	default:
		return fmt.Errorf("backend.model_type %d is not a known model type", typ)
	}
	switch in := b.GetModelInput(); in {
	case registryv1.ModelInput_MODEL_INPUT_UNSPECIFIED:
	case registryv1.ModelInput_MODEL_INPUT_TEXT:
		if tensorModel {
			return errors.New("backend.model_input: tensor models take tensor input, not text")
		}
	case registryv1.ModelInput_MODEL_INPUT_TOKENS:
		if tensorModel {
			return errors.New("backend.model_input: tensor models take tensor input, not tokens")
		}
		if typ == registryv1.ModelType_MODEL_TYPE_CHAT {
			return errors.New("backend.model_input: chat models take text; the gateway has no tokenizer to turn messages into tokens (tokens input is for completions and embeddings)")
		}
	case registryv1.ModelInput_MODEL_INPUT_TENSOR:
		if !tensorModel {
			return fmt.Errorf("backend.model_input: tensor input needs model_type tensor, not %s", typeName(typ))
		}
	default:
		return fmt.Errorf("backend.model_input %d is not a known model input", in)
	}
	switch bt := b.GetBackendType(); bt {
	case registryv1.BackendType_BACKEND_TYPE_UNSPECIFIED:
	case registryv1.BackendType_BACKEND_TYPE_VLLM, registryv1.BackendType_BACKEND_TYPE_OPENAI, registryv1.BackendType_BACKEND_TYPE_OLLAMA:
		if tensorModel {
			return fmt.Errorf("backend.backend_type: tensor models are served by kserve backends, not %s", backendName(bt))
		}
	case registryv1.BackendType_BACKEND_TYPE_KSERVE:
		if !tensorModel {
			return fmt.Errorf("backend.backend_type: kserve backends serve tensor models, not %s", typeName(typ))
		}
	default:
		return fmt.Errorf("backend.backend_type %d is not a known backend type", bt)
	}
	if err := checkURL(b.GetUrl(), tensorModel); err != nil {
		return err
	}
	if b.GetPriority() < 0 {
		return fmt.Errorf("backend.priority must be >= 0, got %d", b.GetPriority())
	}
	cfg := b.GetTensorModelConfig()
	switch {
	case tensorModel && cfg == nil:
		return errors.New("backend.tensor_model_config is required for tensor models")
	case !tensorModel && cfg != nil:
		return fmt.Errorf("backend.tensor_model_config is only for tensor models, not %s", typeName(typ))
	case cfg != nil:
		if cfg.GetName() != "" && cfg.GetName() != b.GetModelName() {
			return fmt.Errorf("backend.tensor_model_config names model %q, but backend.model_name is %q", cfg.GetName(), b.GetModelName())
		}
		// The config is checked exactly as the gateway will serve it.
		if _, err := engines.NewRemoteModel(tensorConfig(b), refuse); err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return fmt.Errorf("backend.tensor_model_config: %s", ce.Message())
			}
			return fmt.Errorf("backend.tensor_model_config: %w", err)
		}
	}
	return nil
}

// normalize returns a copy of a valid b with the derived fields filled in, as it is stored.
func normalize(b *registryv1.Backend) *registryv1.Backend {
	n := proto.CloneOf(b)
	tensorModel := n.GetModelType() == registryv1.ModelType_MODEL_TYPE_TENSOR
	if n.GetModelInput() == registryv1.ModelInput_MODEL_INPUT_UNSPECIFIED {
		n.ModelInput = registryv1.ModelInput_MODEL_INPUT_TEXT
		if tensorModel {
			n.ModelInput = registryv1.ModelInput_MODEL_INPUT_TENSOR
		}
	}
	if n.GetBackendType() == registryv1.BackendType_BACKEND_TYPE_UNSPECIFIED {
		n.BackendType = registryv1.BackendType_BACKEND_TYPE_OPENAI
		if tensorModel {
			n.BackendType = registryv1.BackendType_BACKEND_TYPE_KSERVE
		}
	}
	if tensorModel {
		n.TensorModelConfig = tensorConfig(n)
	}
	return n
}

// tensorConfig is b's tensor config named for b's model.
func tensorConfig(b *registryv1.Backend) *tensorv1.TensorModelConfig {
	cfg := b.GetTensorModelConfig()
	if cfg.GetName() == b.GetModelName() {
		return cfg
	}
	cfg = proto.CloneOf(cfg)
	cfg.Name = b.GetModelName()
	return cfg
}

func refuse(context.Context, *engines.Request, func(*engines.Response) error) error {
	return errors.New("registry: validation only")
}

func checkModelName(name string) error {
	switch {
	case name == "":
		return errors.New("backend.model_name is required")
	case len(name) > MaxModelNameBytes:
		return fmt.Errorf("backend.model_name is %d bytes; at most %d are allowed", len(name), MaxModelNameBytes)
	case !utf8.ValidString(name):
		return errors.New("backend.model_name is not valid UTF-8")
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("backend.model_name %q has leading or trailing space", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("backend.model_name %q has control characters", name)
	}
	return nil
}

func checkURL(raw string, grpcServer bool) error {
	if raw == "" {
		return errors.New("backend.url is required")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("backend.url: %v", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("backend.url %q must be an absolute http:// or https:// URL", raw)
	case u.User != nil:
		return fmt.Errorf("backend.url %q must not hold credentials", raw)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Errorf("backend.url %q must not have a query or fragment", raw)
	case grpcServer && u.Path != "" && u.Path != "/":
		return fmt.Errorf("backend.url %q: a kserve backend's URL is its gRPC address and has no path", raw)
	}
	return nil
}

func typeName(t registryv1.ModelType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "MODEL_TYPE_"))
}

func backendName(t registryv1.BackendType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "BACKEND_TYPE_"))
}
