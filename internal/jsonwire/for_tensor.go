package jsonwire

// NextScalar is NextElement followed by reading the element, in one call, for a reader that
// walks long arrays of scalars (the KServe tensor decoder, lib/tensor): in the array entered
// last, it reads the ',' before the next element (nothing before the first) and the string,
// number, true, false or null that follows, as ReadValue reads it. ok is false, and nothing is
// read, when anything else comes next (the array's end, a nested array or object, the end of
// the input) or the scalar is not valid: the caller then goes the general way (NextElement, then
// what it expects), which reads it or says what is wrong. Called anywhere but in an array, it
// reads nothing.
func (s *Scanner) NextScalar() (t Token, ok bool) {
	if s.err != nil || !s.scalarInArray() {
		return Token{}, false
	}
	b := s.b
	i := skipSpace(b, s.i)
	if !s.first {
		if i >= len(b) || b[i] != ',' {
			return Token{}, false
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) {
		return Token{}, false
	}
	var end int
	var p problem
	switch t.Kind = KindOf(b[i]); t.Kind {
	case String:
		end, t.Flags, p = scanString(b, i, s.strict)
	case Number:
		end, t.Flags, p = scanNumber(b, i)
	case True:
		end, p = scalarLiteral(b, i, "true")
	case False:
		end, p = scalarLiteral(b, i, "false")
	case Null:
		end, p = scalarLiteral(b, i, "null")
	default:
		return Token{}, false
	}
	if p != okay {
		return Token{}, false
	}
	s.i, s.first = end, false
	t.Start, t.End = i, end
	return t, true
}

// scalarInArray reports whether the container entered last, still open, is an array: isObject's
// test in unsigned arithmetic (a shift and a mask) for the levels it keeps inline.
func (s *Scanner) scalarInArray() bool {
	if s.depth == 0 {
		return false
	}
	if d := uint(s.depth - 1); d < 256 {
		return s.objects[d/64]>>(d%64)&1 == 0
	}
	return !s.isObject(s.depth - 1)
}

// scalarLiteral is scanLiteral for a constant lit, which the compiler compares in one load.
func scalarLiteral(b []byte, i int, lit string) (int, problem) {
	if !hasLiteral(b, i, lit) {
		return i, badLiteral
	}
	return i + len(lit), okay
}
