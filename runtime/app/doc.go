// Package app assembles a whole infergate gateway from its YAML config: the config file's types,
// parsing, environment overrides and validation, and the wiring of every surface, stage and shared
// component it names (Build). The command in runtime/ adds flags, signals and a listener; the
// embedding in bindings/embed adds its host program's own models. Both read the same config, so
// a feature configured for one works in the other.
package app
