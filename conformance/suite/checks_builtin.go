package suite

func builtinChecks() []Check {
	return nil
}
