// Causal grouped-query attention over the paged KV cache, in two kernels:
//
// - attention_prefill: a tile of up to PREFILL_QUERIES consecutive tokens of one sequence
//   against key tiles staged in shared memory, with an online softmax (flash-attention style).
// - attention_decode + attention_combine: one token per block, the context split into
//   partitions that run in parallel, merged by the combine kernel.
//
// Keys and values of every token of the step are in the cache before either runs. Cache slot
// of position p of a sequence: block_tables[seq * max_blocks + p / block_size] * block_size +
// p % block_size; a slot holds num_kv_heads * head_dim values. Queries are read from the fused
// qkv rows (stride qkv_stride); outputs are rows of num_heads * head_dim.

#define MAX_ATTENTION_HEAD_DIM 256
#define DIMS_PER_LANE (MAX_ATTENTION_HEAD_DIM / 32)
#define PREFILL_QUERIES 16
#define PREFILL_KEYS 16
#define KEY_STRIDE (MAX_ATTENTION_HEAD_DIM + 2)
#define ATTENTION_WARPS 4
#define ROWS_PER_WARP (PREFILL_QUERIES / ATTENTION_WARPS)

__device__ __forceinline__ size_t cache_slot(const int* block_table, int position,
                                             int block_size) {
    return (size_t)block_table[position / block_size] * block_size + position % block_size;
}

// Grid (tiles, num_heads), ATTENTION_WARPS * 32 threads; warp w owns the tile's queries
// w, w + ATTENTION_WARPS, ... Tile i covers tokens tile_tokens[i] .. + tile_lengths[i] of the
// batch, which belong to sequence tile_seqs[i].
extern "C" __global__ void attention_prefill(
    const bf16* qkv, bf16* out, const bf16* k_cache, const bf16* v_cache, const int* block_tables,
    const int* tile_tokens, const int* tile_lengths, const int* tile_seqs, const int* positions,
    int qkv_stride, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks, float scale) {
    __shared__ float queries[PREFILL_QUERIES][MAX_ATTENTION_HEAD_DIM];
    __shared__ bf16 keys[PREFILL_KEYS][KEY_STRIDE];
    __shared__ bf16 values[PREFILL_KEYS][KEY_STRIDE];
    const int head = blockIdx.y;
    const int kv_head = head / (num_heads / num_kv_heads);
    const int kv_dim = num_kv_heads * head_dim;
    const int first = tile_tokens[blockIdx.x];
    const int length = tile_lengths[blockIdx.x];
    const int* block_table = block_tables + (size_t)tile_seqs[blockIdx.x] * max_blocks;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;

    for (int e = threadIdx.x; e < PREFILL_QUERIES * head_dim; e += blockDim.x) {
        const int row = e / head_dim;
        const int d = e % head_dim;
        queries[row][d] = row < length
            ? bf16_to_f32(qkv[(size_t)(first + row) * qkv_stride + head * head_dim + d]) * scale
            : 0.0f;
    }
    float running_max[ROWS_PER_WARP];
    float running_sum[ROWS_PER_WARP];
    float acc[ROWS_PER_WARP][DIMS_PER_LANE];
    #pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        running_max[r] = NEG_INF;
        running_sum[r] = 0.0f;
        #pragma unroll
        for (int j = 0; j < DIMS_PER_LANE; ++j) {
            acc[r][j] = 0.0f;
        }
    }
    const int last_position = positions[first + length - 1];
    for (int key_start = 0; key_start <= last_position; key_start += PREFILL_KEYS) {
        __syncthreads();
        for (int e = threadIdx.x; e < PREFILL_KEYS * head_dim; e += blockDim.x) {
            const int k = e / head_dim;
            const int d = e % head_dim;
            const int position = key_start + k;
            bf16 key = 0;
            bf16 value = 0;
            if (position <= last_position) {
                const size_t at = cache_slot(block_table, position, block_size) * kv_dim +
                                  (size_t)kv_head * head_dim + d;
                key = k_cache[at];
                value = v_cache[at];
            }
            keys[k][d] = key;
            values[k][d] = value;
        }
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            const int row = warp + r * ATTENTION_WARPS;
            if (row >= length) {
                continue;
            }
            const int query_position = positions[first + row];
            const int key_position = key_start + lane;
            float score = NEG_INF;
            if (lane < PREFILL_KEYS && key_position <= query_position) {
                float dot = 0.0f;
                for (int d = 0; d < head_dim; ++d) {
                    dot += queries[row][d] * bf16_to_f32(keys[lane][d]);
                }
                score = dot;
            }
            const float tile_max = warp_max(score);
            if (tile_max == NEG_INF) {
                continue;
            }
            const float new_max = fmaxf(running_max[r], tile_max);
            const float weight = score == NEG_INF ? 0.0f : expf(score - new_max);
            const float correction = expf(running_max[r] - new_max);
            running_sum[r] = running_sum[r] * correction + warp_sum(weight);
            #pragma unroll
            for (int j = 0; j < DIMS_PER_LANE; ++j) {
                acc[r][j] *= correction;
            }
            #pragma unroll
            for (int k = 0; k < PREFILL_KEYS; ++k) {
                const float w = __shfl_sync(0xffffffffu, weight, k);
                #pragma unroll
                for (int j = 0; j < DIMS_PER_LANE; ++j) {
                    const int d = lane + 32 * j;
                    if (d < head_dim) {
                        acc[r][j] += w * bf16_to_f32(values[k][d]);
                    }
                }
            }
            running_max[r] = new_max;
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const int row = warp + r * ATTENTION_WARPS;
        if (row >= length) {
            continue;
        }
        bf16* dst = out + (size_t)(first + row) * num_heads * head_dim + head * head_dim;
        #pragma unroll
        for (int j = 0; j < DIMS_PER_LANE; ++j) {
            const int d = lane + 32 * j;
            if (d < head_dim) {
                dst[d] = f32_to_bf16(acc[r][j] / running_sum[r]);
            }
        }
    }
}

// Grid (decode queries, num_heads, partitions), ATTENTION_WARPS * 32 threads. Query i is token
// query_tokens[i] of sequence query_seqs[i]; partition z covers context positions
// [z * partition_size, (z + 1) * partition_size). Writes the partition's running max and sum to
// partial_stats[(i * num_heads + head) * partitions + z] and its unnormalized output to
// partial_out (head_dim values at the same index).
//
// head_dim is a power of two from 8 to MAX_ATTENTION_HEAD_DIM: each lane reads 8 values of a
// key or value row in one 16-byte load, head_dim / 8 lanes share a key, and a warp has
// 32 / (head_dim / 8) keys in flight.
extern "C" __global__ void attention_decode(
    const bf16* qkv, const bf16* k_cache, const bf16* v_cache, const int* block_tables,
    const int* query_tokens, const int* query_seqs, const int* positions, float* partial_stats,
    float* partial_out, int qkv_stride, int num_heads, int num_kv_heads, int head_dim,
    int block_size, int max_blocks, int partition_size, float scale) {
    // One partial (max, sum, head_dim outputs) per key group of every warp: at most
    // ATTENTION_WARPS * 32 * 8 / head_dim groups of head_dim values.
    __shared__ float group_max[ATTENTION_WARPS * 32];
    __shared__ float group_sum[ATTENTION_WARPS * 32];
    __shared__ float group_acc[ATTENTION_WARPS * 32 * 8];
    const int query = blockIdx.x;
    const int head = blockIdx.y;
    const int partition = blockIdx.z;
    const int partitions = gridDim.z;
    const int kv_head = head / (num_heads / num_kv_heads);
    const int kv_dim = num_kv_heads * head_dim;
    const int token = query_tokens[query];
    const int* block_table = block_tables + (size_t)query_seqs[query] * max_blocks;
    const int context = positions[token] + 1;
    const int start = partition * partition_size;
    const int end = min(context, start + partition_size);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int lanes_per_key = head_dim / 8;
    const int keys_per_warp = 32 / lanes_per_key;
    const int group = lane / lanes_per_key;
    const int first_dim = (lane % lanes_per_key) * 8;

    float q[8];
    float acc[8];
    const bf16* q_row = qkv + (size_t)token * qkv_stride + head * head_dim + first_dim;
    for (int j = 0; j < 8; ++j) {
        q[j] = bf16_to_f32(q_row[j]) * scale;
        acc[j] = 0.0f;
    }
    float running_max = NEG_INF;
    float running_sum = 0.0f;
    const int stride = ATTENTION_WARPS * keys_per_warp;
    for (int base = start + warp * keys_per_warp; base < end; base += stride) {
        const int position = base + group;
        const bool valid = position < end;
        uint4 key_bits = make_uint4(0u, 0u, 0u, 0u);
        uint4 value_bits = make_uint4(0u, 0u, 0u, 0u);
        if (valid) {
            const size_t at = cache_slot(block_table, position, block_size) * kv_dim +
                              (size_t)kv_head * head_dim + first_dim;
            key_bits = *reinterpret_cast<const uint4*>(k_cache + at);
            value_bits = *reinterpret_cast<const uint4*>(v_cache + at);
        }
        const bf16* key = reinterpret_cast<const bf16*>(&key_bits);
        const bf16* value = reinterpret_cast<const bf16*>(&value_bits);
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            dot += q[j] * bf16_to_f32(key[j]);
        }
        for (int offset = lanes_per_key / 2; offset > 0; offset >>= 1) {
            dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        }
        if (valid) {
            const float new_max = fmaxf(running_max, dot);
            const float correction = expf(running_max - new_max);
            const float weight = expf(dot - new_max);
            running_sum = running_sum * correction + weight;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                acc[j] = acc[j] * correction + weight * bf16_to_f32(value[j]);
            }
            running_max = new_max;
        }
    }
    const int slot = warp * keys_per_warp + group;
    if (lane % lanes_per_key == 0) {
        group_max[slot] = running_max;
        group_sum[slot] = running_sum;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        group_acc[slot * head_dim + first_dim + j] = acc[j];
    }
    __syncthreads();
    const int groups = ATTENTION_WARPS * keys_per_warp;
    float block_max = NEG_INF;
    for (int g = 0; g < groups; ++g) {
        block_max = fmaxf(block_max, group_max[g]);
    }
    const size_t index = ((size_t)query * num_heads + head) * partitions + partition;
    float block_total = 0.0f;
    for (int g = 0; g < groups; ++g) {
        if (group_max[g] != NEG_INF) {
            block_total += group_sum[g] * expf(group_max[g] - block_max);
        }
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float total = 0.0f;
        for (int g = 0; g < groups; ++g) {
            if (group_max[g] != NEG_INF) {
                total += group_acc[g * head_dim + d] * expf(group_max[g] - block_max);
            }
        }
        partial_out[index * head_dim + d] = total;
    }
    if (threadIdx.x == 0) {
        partial_stats[2 * index] = block_max;
        partial_stats[2 * index + 1] = block_total;
    }
}

// Grid (decode queries, num_heads), threads over head_dim: merges the partitions of
// attention_decode into the output row of token query_tokens[i].
extern "C" __global__ void attention_combine(const float* partial_stats, const float* partial_out,
                                             const int* query_tokens, bf16* out, int num_heads,
                                             int head_dim, int partitions) {
    const int query = blockIdx.x;
    const int head = blockIdx.y;
    const size_t base = ((size_t)query * num_heads + head) * partitions;
    float global_max = NEG_INF;
    for (int z = 0; z < partitions; ++z) {
        global_max = fmaxf(global_max, partial_stats[2 * (base + z)]);
    }
    float total = 0.0f;
    for (int z = 0; z < partitions; ++z) {
        const float m = partial_stats[2 * (base + z)];
        if (m != NEG_INF) {
            total += partial_stats[2 * (base + z) + 1] * expf(m - global_max);
        }
    }
    bf16* dst = out + (size_t)query_tokens[query] * num_heads * head_dim + head * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float value = 0.0f;
        for (int z = 0; z < partitions; ++z) {
            const float m = partial_stats[2 * (base + z)];
            if (m != NEG_INF) {
                value += partial_out[(base + z) * head_dim + d] * expf(m - global_max);
            }
        }
        dst[d] = f32_to_bf16(value / total);
    }
}
