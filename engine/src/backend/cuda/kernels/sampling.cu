// Sampling on the GPU: the most likely token of each row of logits, so that greedy steps send
// only token ids to the host.

#define ARGMAX_THREADS 1024

// One block of ARGMAX_THREADS per row; ties go to the lowest token id.
extern "C" __global__ void argmax_rows(const float* logits, int vocab, unsigned int* tokens,
                                       float* best_values) {
    __shared__ float values[32];
    __shared__ int indices[32];
    const float* row = logits + (size_t)blockIdx.x * vocab;
    float best = NEG_INF;
    int best_index = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        if (v > best || (v == best && i < best_index)) {
            best = v;
            best_index = i;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
        if (other > best || (other == best && other_index < best_index)) {
            best = other;
            best_index = other_index;
        }
    }
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) {
        values[warp] = best;
        indices[warp] = best_index;
    }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        best = lane < warps ? values[lane] : NEG_INF;
        best_index = lane < warps ? indices[lane] : 0x7fffffff;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_xor_sync(0xffffffffu, best, offset);
            const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
            if (other > best || (other == best && other_index < best_index)) {
                best = other;
                best_index = other_index;
            }
        }
        if (lane == 0) {
            tokens[blockIdx.x] = best_index == 0x7fffffff ? 0u : (unsigned int)best_index;
            best_values[blockIdx.x] = best;
        }
    }
}
