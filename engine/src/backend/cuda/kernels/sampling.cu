// Sampling on the GPU, so that only token ids (and their scores) go back to the host.
//
// adjust_logits applies logit biases and repetition, presence and frequency penalties to the
// few (row, token) entries they touch. sample_rows then picks one token a row: the argmax when
// the temperature is 0 (ties to the lowest id), otherwise a draw from softmax(logits / T)
// restricted by top-k, min-p and top-p in that order (the host sampler's order). The filters
// are thresholds on the unnormalized probability p = exp((l - max) / T), found by bisection, so
// nothing is sorted; the draw walks the kept tokens in id order with the row's uniform number.

#define SAMPLE_THREADS 1024
#define BISECTION_STEPS 40

// Fields of one adjustment entry (ints; the bias is a float's bits).
#define ADJUST_FIELDS 5

// One thread per entry: row, token, times generated, in prompt (0/1), bias bits.
extern "C" __global__ void adjust_logits(float* logits, int vocab, const int* entries, int count,
                                         const float* repetition, const float* presence,
                                         const float* frequency) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= count) {
        return;
    }
    const int* entry = entries + (size_t)e * ADJUST_FIELDS;
    const int row = entry[0];
    const int token = entry[1];
    const int generated = entry[2];
    if (token < 0 || token >= vocab) {
        return;
    }
    float* value = logits + (size_t)row * vocab + token;
    float v = *value + __int_as_float(entry[4]);
    const float penalty = repetition[row];
    if (penalty != 1.0f && (generated > 0 || entry[3] != 0)) {
        v = v > 0.0f ? v / penalty : v * penalty;
    }
    if (generated > 0) {
        v -= presence[row] + frequency[row] * (float)generated;
    }
    *value = v;
}

// Sum over the row of p >= threshold (as mass, or as a count).
__device__ float kept(const float* row, int vocab, float scale, float max_scaled, float threshold,
                      bool count) {
    float total = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float p = expf(row[i] * scale - max_scaled);
        if (p >= threshold) {
            total += count ? 1.0f : p;
        }
    }
    return block_sum(total);
}

// One block of SAMPLE_THREADS per row. tokens[r] and values[r] get the pick and its logit.
extern "C" __global__ void sample_rows(const float* logits, int vocab, const float* temperature,
                                       const int* top_k, const float* top_p, const float* min_p,
                                       const float* uniform, unsigned int* tokens,
                                       float* values) {
    __shared__ float chunk_mass[SAMPLE_THREADS];
    __shared__ int pick;
    const int r = blockIdx.x;
    const float* row = logits + (size_t)r * vocab;
    const float t = temperature[r];
    const int k = top_k[r];

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
    __shared__ float warp_best[32];
    __shared__ int warp_index[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_best[warp] = best;
        warp_index[warp] = best_index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        best = warp_best[0];
        best_index = warp_index[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {
            if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < best_index)) {
                best = warp_best[w];
                best_index = warp_index[w];
            }
        }
        pick = best_index == 0x7fffffff ? 0 : best_index;
    }
    __syncthreads();
    if (t <= 1e-5f || k == 1) {
        if (threadIdx.x == 0) {
            tokens[r] = (unsigned int)pick;
            values[r] = row[pick];
        }
        return;
    }

    const float scale = 1.0f / t;
    const float max_scaled = row[pick] * scale;
    float floor = 0.0f;
    if (k > 0 && k < vocab) {
        float lo = 0.0f;
        float hi = 1.0f;
        for (int step = 0; step < BISECTION_STEPS; ++step) {
            const float mid = 0.5f * (lo + hi);
            if (kept(row, vocab, scale, max_scaled, mid, true) >= (float)k) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        floor = lo;
    }
    const float total = kept(row, vocab, scale, max_scaled, floor, false);
    floor = fmaxf(floor, min_p[r]);
    const float target_mass = top_p[r] * total;
    if (top_p[r] < 1.0f && kept(row, vocab, scale, max_scaled, floor, false) >= target_mass) {
        float lo = floor;
        float hi = 1.0f;
        if (kept(row, vocab, scale, max_scaled, hi, false) >= target_mass) {
            lo = hi;
        } else {
            for (int step = 0; step < BISECTION_STEPS; ++step) {
                const float mid = 0.5f * (lo + hi);
                if (kept(row, vocab, scale, max_scaled, mid, false) >= target_mass) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
        }
        floor = lo;
    }

    // The draw: each thread owns a contiguous chunk of ids; the chunk where the running mass
    // passes uniform * kept mass holds the pick.
    const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
    const int first = threadIdx.x * chunk;
    const int last = min(vocab, first + chunk);
    float mass = 0.0f;
    for (int i = first; i < last; ++i) {
        const float p = expf(row[i] * scale - max_scaled);
        if (p >= floor) {
            mass += p;
        }
    }
    chunk_mass[threadIdx.x] = mass;
    __syncthreads();
    if (threadIdx.x == 0) {
        float all = 0.0f;
        for (int c = 0; c < (int)blockDim.x; ++c) {
            all += chunk_mass[c];
        }
        float target = uniform[r] * all;
        int chosen = pick;
        for (int c = 0; c < (int)blockDim.x; ++c) {
            if (target < chunk_mass[c]) {
                const int end = min(vocab, (c + 1) * chunk);
                for (int i = c * chunk; i < end; ++i) {
                    const float p = expf(row[i] * scale - max_scaled);
                    if (p >= floor) {
                        chosen = i;
                        if (target < p) {
                            break;
                        }
                        target -= p;
                    }
                }
                break;
            }
            target -= chunk_mass[c];
        }
        tokens[r] = (unsigned int)chosen;
        values[r] = row[chosen];
    }
}
