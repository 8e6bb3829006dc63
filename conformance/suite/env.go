package suite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// env is what every check shares: the connection and what discovery learned about the server.
type env struct {
	cfg    Config
	conn   *grpc.ClientConn
	client inference.GRPCInferenceServiceClient
	// server is the ServerMetadata answer; nil when the server does not implement it.
	server *inference.ServerMetadataResponse
	ext    map[string]bool
	// index is the RepositoryIndex answer; nil when the server does not implement it.
	index  []*inference.RepositoryIndexResponse_ModelIndex
	models []*model
	// discoveryErrs are problems met while discovering models, reported by the discovery check.
	discoveryErrs []string
	// needModels is RepositoryIndex's UNIMPLEMENTED answer when no models were named: the server
	// cannot list its models, so Run stops with ErrModelsRequired.
	needModels error
	// listedNone is true when RepositoryIndex answered and listed no ready model.
	listedNone bool
}

// model is one served model as the protocol describes it.
type model struct {
	name string
	meta *inference.ModelMetadataResponse
	// config is nil when the server has no ModelConfig.
	config *inference.ModelConfig
}

func (m *model) decoupled() bool { return m.config.GetModelTransactionPolicy().GetDecoupled() }
func (m *model) sequence() bool  { return m.config.GetSequenceBatching() != nil }

// maxBatch is the model's max_batch_size, from its config when there is one, else inferred from
// metadata: a leading -1 on every input suggests a batching model, but without a config the
// suite assumes none.
func (m *model) maxBatch() int {
	if m.config != nil {
		return int(m.config.GetMaxBatchSize())
	}
	return 0
}

// maxMessage is the gRPC message limit the suite's client accepts: Triton's INT32_MAX, so that
// any RESOURCE_EXHAUSTED seen comes from the server.
const maxMessage = math.MaxInt32

func newEnv(ctx context.Context, cfg Config) (*env, error) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithInitialWindowSize(16 << 20),
		grpc.WithInitialConnWindowSize(32 << 20),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.GRPCAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("conformance: connecting to %s: %w", cfg.GRPCAddr, err)
	}
	e := &env{cfg: cfg, conn: conn, client: inference.NewGRPCInferenceServiceClient(conn), ext: map[string]bool{}}
	e.discover(ctx)
	return e, nil
}

func (e *env) close() { e.conn.Close() }

// discover learns the server's metadata and models. Failures are recorded, not returned: the
// checks that depend on what is missing skip or fail with their own message.
func (e *env) discover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	if md, err := e.client.ServerMetadata(ctx, &inference.ServerMetadataRequest{}); err == nil {
		e.server = md
		for _, x := range md.GetExtensions() {
			e.ext[x] = true
		}
	} else {
		e.discoveryErrs = append(e.discoveryErrs, fmt.Sprintf("ServerMetadata: %s", describeErr(err)))
	}
	names := slices.Clone(e.cfg.Models)
	if idx, err := e.client.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{Ready: true}); err == nil {
		e.index = idx.GetModels()
		if len(names) == 0 {
			for _, m := range idx.GetModels() {
				if !slices.Contains(names, m.GetName()) {
					names = append(names, m.GetName())
				}
			}
		}
		e.listedNone = len(names) == 0
	} else if len(names) == 0 {
		// KServe v2 has no model-listing call: a server without Triton's RepositoryIndex is not
		// at fault, the run needs -model. Any other answer is the server's failure to list.
		if status.Code(err) == codes.Unimplemented {
			e.needModels = err
			return
		}
		e.discoveryErrs = append(e.discoveryErrs, fmt.Sprintf("RepositoryIndex: %s (name models with -model)", describeErr(err)))
	}
	sort.Strings(names)
	for _, name := range names {
		m := &model{name: name}
		md, err := e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: name})
		if err != nil {
			e.discoveryErrs = append(e.discoveryErrs, fmt.Sprintf("ModelMetadata(%q): %s", name, describeErr(err)))
			continue
		}
		m.meta = md
		if c, err := e.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: name}); err == nil {
			m.config = c.GetConfig()
		}
		e.models = append(e.models, m)
	}
}

func (e *env) modelNames() []string {
	names := make([]string, len(e.models))
	for i, m := range e.models {
		names[i] = m.name
	}
	return names
}

// describeErr renders a gRPC error as "CODE: message".
func describeErr(err error) string {
	if err == nil {
		return "OK"
	}
	s, _ := status.FromError(err)
	return fmt.Sprintf("%s: %s", codeName(s.Code()), s.Message())
}

// codeName is the canonical upper-case name of a gRPC code, as the specs write it.
func codeName(c codes.Code) string {
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
		codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
		codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}
