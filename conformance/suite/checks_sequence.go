package suite

func sequenceChecks() []Check {
	return nil
}
