package app

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
)

// registerDense loads each dense_models file and registers its model: a KIND_GPU one is placed
// on its GPU by the registry's placer, and fails the start where there is none.
func registerDense(reg *engines.Registry, models map[string]denseModelConfig, log *slog.Logger) error {
	for _, name := range slices.Sorted(maps.Keys(models)) {
		c := models[name]
		file, err := os.ReadFile(c.Path)
		if err != nil {
			return fmt.Errorf("dense_models.%s: %w", name, err)
		}
		net, err := dense.Load(file)
		if err != nil {
			return fmt.Errorf("dense_models.%s: %s: %w", name, c.Path, err)
		}
		maxBatch := c.MaxBatchSize
		if maxBatch == 0 {
			maxBatch = 64
		}
		m := dense.NewModel(name, net, maxBatch)
		kind := inference.ModelInstanceGroup_KIND_CPU
		if c.Kind == "KIND_GPU" {
			kind = inference.ModelInstanceGroup_KIND_GPU
		}
		m.OnInstances(kind, c.Count, c.GPUs)
		if _, err := reg.Register(m); err != nil {
			return fmt.Errorf("dense_models.%s: %w", name, err)
		}
		log.Info("dense model loaded", "model", name, "layers", len(net.Layers), "in", net.In(), "out", net.Out(), "kind", kind.String())
	}
	return nil
}
