package suite

func configChecks() []Check {
	return nil
}
