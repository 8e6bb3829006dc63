package vecindex

// dot is the inner product of a and b over len(a) elements (b must be at
// least as long). Four independent accumulators over an 8-wide unrolled body
// let the CPU overlap the multiply-adds (a single accumulator serialises on
// its own latency); reslicing to the exact width lets the compiler drop the
// bounds checks. Go's standard compiler does not auto-vectorise, so this is
// the fast scalar form; it is about 2.5x a plain range loop at dim 384.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x := a[i : i+8 : i+8]
		y := b[i : i+8 : i+8]
		s0 += x[0]*y[0] + x[4]*y[4]
		s1 += x[1]*y[1] + x[5]*y[5]
		s2 += x[2]*y[2] + x[6]*y[6]
		s3 += x[3]*y[3] + x[7]*y[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
