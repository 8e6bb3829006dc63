package registry

// For the external tests (package registry_test), which run registrytest's suite: the internal
// tests' Redis replica.
var NewRedisReplica = newRedisReplica
