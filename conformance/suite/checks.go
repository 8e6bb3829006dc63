package suite

// Checks returns every check in the order Run runs them: the cheap protocol basics first, so a
// report on a broken server starts with the root cause.
func Checks() []Check {
	var all []Check
	for _, group := range [][]Check{
		healthChecks(),
		metadataChecks(),
		inferChecks(),
		validateChecks(),
		dataChecks(),
		paramChecks(),
		transportChecks(),
		configChecks(),
		streamChecks(),
		decoupledChecks(),
		sequenceChecks(),
		restChecks(),
		builtinChecks(),
		shmChecks(),
		settingsChecks(),
		bridgeChecks(),
	} {
		all = append(all, group...)
	}
	return all
}
