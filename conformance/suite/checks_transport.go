package suite

func transportChecks() []Check {
	return nil
}
