// After the fused QKV projection: bias (Qwen2), per-head RMSNorm of queries and keys (Qwen3),
// rotary position embedding, and the new keys and values written into the paged KV cache.

#define MAX_HEAD_DIM 512

// qkv rows are [q heads | k heads | v heads]. One block per (token, query or key head);
// blockDim.x is head_dim rounded up to a multiple of 32. Queries are rotated in place; keys are
// rotated and, with the values, stored at cache slot slots[t] (block * block_size + offset).
extern "C" __global__ void qkv_prepare(bf16* qkv, const bf16* bias, const bf16* q_norm,
                                       const bf16* k_norm, const int* positions,
                                       const float* inverse_frequencies, const long long* slots,
                                       bf16* k_cache, bf16* v_cache, int num_heads,
                                       int num_kv_heads, int head_dim, float eps) {
    __shared__ float head[MAX_HEAD_DIM];
    const int t = blockIdx.x;
    const int h = blockIdx.y;
    const int i = threadIdx.x;
    const int q_dim = num_heads * head_dim;
    const int kv_dim = num_kv_heads * head_dim;
    const bool is_query = h < num_heads;
    const int column = is_query ? h * head_dim : q_dim + (h - num_heads) * head_dim;
    bf16* x = qkv + (size_t)t * (q_dim + 2 * kv_dim) + column;

    float v = 0.0f;
    if (i < head_dim) {
        v = bf16_to_f32(x[i]);
        if (bias != 0) {
            v = round_bf16(v + bf16_to_f32(bias[column + i]));
        }
    }
    const bf16* norm = is_query ? q_norm : k_norm;
    if (norm != 0) {
        const float sum_squares = block_sum(i < head_dim ? v * v : 0.0f);
        const float inverse = rsqrtf(sum_squares / (float)head_dim + eps);
        if (i < head_dim) {
            v = round_bf16(round_bf16(v * inverse) * bf16_to_f32(norm[i]));
        }
    }
    if (i < head_dim) {
        head[i] = v;
    }
    __syncthreads();
    if (i >= head_dim) {
        return;
    }
    const int half_dim = head_dim / 2;
    const int pair = i < half_dim ? i : i - half_dim;
    float sine, cosine;
    sincosf((float)positions[t] * inverse_frequencies[pair], &sine, &cosine);
    const float rotated = i < half_dim ? -head[i + half_dim] : head[i - half_dim];
    const bf16 out = f32_to_bf16(v * cosine + rotated * sine);
    x[i] = out;
    if (!is_query) {
        const int kv_head = h - num_heads;
        const size_t slot = (size_t)slots[t] * kv_dim + (size_t)kv_head * head_dim + i;
        k_cache[slot] = out;
        float value = bf16_to_f32(x[kv_dim + i]);
        if (bias != 0) {
            value = round_bf16(value + bf16_to_f32(bias[column + kv_dim + i]));
        }
        v_cache[slot] = f32_to_bf16(value);
    }
}
