package openaiwire

// EmbeddingsRequest is a /v1/embeddings request of texts, as the gateway's own embedders send it
// (lib/embed's remote embedder: the response cache's semantic keys). Written with encoding/json:
// a cold path, once per batch of texts.
type EmbeddingsRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

// Embeddings is a /v1/embeddings answer as the gateway reads it: the vectors by index (Index nil
// when the upstream left it out), or the upstream's error. Read with encoding/json, which bounds
// nothing: the caller bounds the body first (lib/embed does, by the vectors it asked for).
type Embeddings struct {
	Data  []Embedding `json:"data"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Embedding is one vector of an Embeddings answer.
type Embedding struct {
	Index     *int      `json:"index"`
	Embedding []float32 `json:"embedding"`
}
