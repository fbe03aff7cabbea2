// Row-wise kernels of the forward pass: embedding lookup, RMSNorm fused with the residual add,
// SiLU-multiply, and gathering the rows that need logits.

// out[t] = table[tokens[t]]; one block per token.
extern "C" __global__ void embed(const unsigned int* tokens, const bf16* table, bf16* out,
                                 int hidden) {
    const bf16* row = table + (size_t)tokens[blockIdx.x] * hidden;
    bf16* dst = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        dst[i] = row[i];
    }
}

// residual += delta (when delta is not null), then out = RMSNorm(residual) * weight, rounding
// where a bf16 PyTorch model rounds. One block per row.
extern "C" __global__ void add_rms_norm(bf16* residual, const bf16* delta, const bf16* weight,
                                        bf16* out, int hidden, float eps) {
    const size_t row = (size_t)blockIdx.x * hidden;
    float sum_squares = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float r = bf16_to_f32(residual[row + i]);
        if (delta != 0) {
            r = round_bf16(r + bf16_to_f32(delta[row + i]));
            residual[row + i] = f32_to_bf16(r);
        }
        sum_squares += r * r;
    }
    const float inverse = rsqrtf(block_sum(sum_squares) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float normed = round_bf16(bf16_to_f32(residual[row + i]) * inverse);
        out[row + i] = f32_to_bf16(normed * bf16_to_f32(weight[i]));
    }
}

// gate_up rows are [gate | up], `width` each; out = SiLU(gate) * up. Grid (rows, column chunks),
// one element a thread: a batch-1 decode step has one row, and one block walking a 14k-wide row
// alone waits on memory once per element.
extern "C" __global__ void silu_mul(const bf16* gate_up, bf16* out, int width) {
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= width) {
        return;
    }
    const bf16* gate = gate_up + (size_t)blockIdx.x * 2 * width;
    const bf16* up = gate + width;
    const float g = bf16_to_f32(gate[i]);
    const float silu = round_bf16(g / (1.0f + expf(-g)));
    out[(size_t)blockIdx.x * width + i] = f32_to_bf16(silu * bf16_to_f32(up[i]));
}

// out[r] = x[rows[r]]; one block per gathered row.
extern "C" __global__ void gather_rows(const bf16* x, const int* rows, bf16* out, int hidden) {
    const bf16* src = x + (size_t)rows[blockIdx.x] * hidden;
    bf16* dst = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        dst[i] = src[i];
    }
}
