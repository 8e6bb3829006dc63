package suite

// The documents checks cite. Quotes are exact, Markdown markup kept, except that line breaks
// (and the proto's // comment markers at line starts) are written as single spaces.
const (
	srcV2       = "kserve/kserve docs/predict-api/v2/required_api.md"
	srcV2Proto  = "kserve/kserve docs/predict-api/v2/grpc_predict_v2.proto"
	srcRPCCode  = "googleapis/googleapis google/rpc/code.proto"
	srcGRPCDoc  = "grpc/grpc doc/statuscodes.md"
	srcTriton   = "triton-inference-server/server docs/"
	srcExamples = "triton-inference-server/server docs/examples/model_repository/"
	srcOwn      = "infergate README.md"
)

// v2 cites KServe v2's protocol text.
func v2(text string) Citation { return Citation{Source: srcV2, Text: text} }

// v2proto cites a comment of KServe v2's gRPC definition.
func v2proto(text string) Citation { return Citation{Source: srcV2Proto, Text: text} }

// rpcCode cites google.rpc.Code, the status codes KServe v2's gRPC errors use.
func rpcCode(text string) Citation { return Citation{Source: srcRPCCode, Text: text} }

// grpcDoc cites gRPC's own status code document.
func grpcDoc(text string) Citation { return Citation{Source: srcGRPCDoc, Text: text} }

// triton cites one of Triton's documents, a path under docs/.
func triton(path, text string) Citation { return Citation{Source: srcTriton + path, Text: text} }

// example cites a file of Triton's example model repository.
func example(path, text string) Citation { return Citation{Source: srcExamples + path, Text: text} }

// own cites infergate's documentation of its own conventions.
func own(text string) Citation { return Citation{Source: srcOwn, Text: text} }

// Sentences more than one check or message uses.
var (
	citeFailure = v2("The OK code indicates success and other codes indicate failure.")
	citeID      = v2proto("Optional identifier for the request. If specified will be returned in the response.")
	citeSize    = v2proto("For each tensor, the size of this content must match what is expected by the tensor's shape and data type.")
	citeTypedSz = v2proto("The size must match what is expected by the tensor's shape.")
	citeInputs  = v2("“inputs” : The inputs required by the model.")
	citeDtype   = v2("\"datatype\" : The data-type of the input tensor elements as defined in [Tensor Data Types](#tensor-data-types).")
	citeVersion = v2("\"versions\" : The model versions that may be explicitly requested via the appropriate endpoint.")
	citeInvalid = rpcCode("The client specified an invalid argument.")
	citeRESTErr = v2("A failed inference request must be indicated by an HTTP error status (typically 400).")
	citeHealth  = v2("A 200 status code indicates true and a 4xx status code indicates false.")
	citeNumeric = triton("user_guide/model_repository.md", "Each version is stored in its own, numerically named, subdirectory where the name of the subdirectory corresponds to the version number of the model.")
	citeReserve = triton("protocol/extension_parameters.md", "The following parameters are reserved for Triton's usage and should not be used as custom parameters:")
	citeSeqExt  = triton("protocol/extension_sequence.md", "An inference request can specify that it is part of a sequence using the “sequence_id” parameter in the request and by using the “sequence_start” and “sequence_end” parameters to indicate the start and end of sequences.")
	citeFinal   = triton("user_guide/decoupled_models.md", "Client applications using streaming GRPC can access this information by checking the response parameters for the `\"triton_final_response\"` parameter.")
	citeBinary  = triton("protocol/extension_binary_data.md", "If any binary data is present in the request or response the Inference-Header-Content-Length header must be provided to give the length of the JSON object")
	citeBridge  = own("outputs `text_output` and `finish_reason` (one element per choice)")
)

// The google.rpc.Code sentences messages quote to say why a code is wrong.
const (
	internalMeaning = `google.rpc.Code INTERNAL: "This error code is reserved for serious errors." (the server's fault, not the client's)`
	unknownMeaning  = `google.rpc.Code UNKNOWN: "Unknown error." (a server-side failure, not the client's)`
)

var (
	citeLive     = v2("The ServerLive API indicates if the inference server is able to receive and respond to metadata and inference requests.")
	citeOutputs  = v2("The *$request_output* JSON is used to request which output tensors should be returned from the model.")
	citeUnsigned = v2("Each dimension must be an integer representable as an unsigned 64-bit integer value.")
	citeRawEach  = v2proto("To use the raw representation 'raw_input_contents' must be initialized with data for each tensor in the same order as 'inputs'.")
	citeSeqStart = triton("protocol/extension_sequence.md", "\"sequence_start\" : boolean value if set to true in a request indicates that the request is the first in a sequence.")
	citeLarge    = v2("The proposed APIs are able to support both easy-to-use and high-performance use cases.")
)
