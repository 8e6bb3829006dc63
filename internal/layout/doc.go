// Package layout holds the test that keeps the repository's layout rule true (see
// docs/architecture.md): a package's top-level folder says what it is, and each folder imports
// only from the folders below it.
//
//	lib/       pure libraries: import neither net/http nor core/pipeline, nor any folder above
//	core/      what every layer shares: the pipeline (Request, Handler, Interceptor), errors and HTTP
//	           conventions (core/httpapi), tracing (core/tracing)
//	engines/   what a servable model is, the model registry and the KServe request path
//	store/     state replicas share, in process or in Redis/Kafka
//	upstream/  the upstream pool, its membership (registry) and its clients
//	models/    models served in process, written against engines and the generated code
//	stage/     the LLM pipeline's interceptors
//	surface/   client protocols, each translating to engines or to a pipeline.Request
//	runtime/, bindings/, conformance/, examples/, tools/: programs that assemble the rest
//
// gen/ (generated) and internal/ sit beside lib/: they may not import the folders that serve or
// assemble (store and above), with the one exception that generated typed-model code imports
// engines.
package layout
