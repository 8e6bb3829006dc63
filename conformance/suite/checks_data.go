package suite

func dataChecks() []Check {
	return nil
}
