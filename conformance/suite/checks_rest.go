package suite

func restChecks() []Check {
	return nil
}
