// The GPU engine's kernels. gen.sh compiles this file to kernels.ptx with nvcc (committed, and
// embedded in the cuda-tagged build); the driver JIT-compiles the PTX for the GPU it runs on.
// Every kernel is extern "C" so that its PTX name is the name the engine looks up.

// OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 over n INT32s, wrapping as Triton's
// `simple` does (unsigned arithmetic: signed overflow is undefined in C++).
extern "C" __global__ void add_sub_i32(const int *a, const int *b, int *sum, int *diff, unsigned n) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		unsigned x = (unsigned)a[i], y = (unsigned)b[i];
		sum[i] = (int)(x + y);
		diff[i] = (int)(x - y);
	}
}

// y[r][c] = act(y[r][c] + bias[c]) over a rows x cols row-major matrix: a dense layer's bias and
// activation after its GEMM (relu != 0: max(0, v); otherwise the identity).
extern "C" __global__ void bias_act_f32(float *y, const float *bias, unsigned rows, unsigned cols, int relu) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < rows * cols) {
		float v = y[i] + bias[i % cols];
		y[i] = relu && v < 0.0f ? 0.0f : v;
	}
}
