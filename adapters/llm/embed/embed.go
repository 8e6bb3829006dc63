// Package embed turns texts into L2-normalised float32 vectors for the
// semantic response cache: a built-in lexical embedder (no model, no
// network) and a client for an OpenAI-compatible /v1/embeddings model that
// the gateway already routes, which batches concurrent callers.
package embed

import "context"

// Embedder returns one L2-normalised vector per text, all of one length.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}
