package suite

func paramChecks() []Check {
	return nil
}
