package respcache

import "github.com/infergate/infergate/lib/vecindex"

// The semantic index of a partition's entries is a vecindex.Index: exact below a size, HNSW
// above it.
type vecIndex = vecindex.Index

func newIndex(dim int) *vecIndex { return vecindex.New(vecindex.Options{Dim: dim}) }
