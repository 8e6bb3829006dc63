package suite

func decoupledChecks() []Check {
	return nil
}
