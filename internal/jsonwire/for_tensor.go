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
	if s.err != nil || s.depth == 0 || s.isObject(s.depth-1) {
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
	case True: // literal, inlined with each constant (not scanLiteral's call): BOOL tensors
		end, p = literal(b, i, "true")
	case False:
		end, p = literal(b, i, "false")
	case Null:
		end, p = literal(b, i, "null")
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
