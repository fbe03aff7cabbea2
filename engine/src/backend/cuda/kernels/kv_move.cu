// Moving a request's KV to another engine: the blocks of one layer's key or value cache gathered
// into a contiguous staging buffer (which goes to the host and over the wire), or scattered back
// from one. Grid (blocks moved), threads over a block's 16-byte words (block_size * kv_dim bf16
// values; kv_dim is a multiple of 8, so a block is whole words).

extern "C" __global__ void kv_gather(const uint4* cache, const int* blocks, uint4* staged,
                                     int words_per_block) {
    const uint4* src = cache + (size_t)blocks[blockIdx.x] * words_per_block;
    uint4* dst = staged + (size_t)blockIdx.x * words_per_block;
    for (int i = threadIdx.x; i < words_per_block; i += blockDim.x) {
        dst[i] = src[i];
    }
}

extern "C" __global__ void kv_scatter(uint4* cache, const int* blocks, const uint4* staged,
                                      int words_per_block) {
    uint4* dst = cache + (size_t)blocks[blockIdx.x] * words_per_block;
    const uint4* src = staged + (size_t)blockIdx.x * words_per_block;
    for (int i = threadIdx.x; i < words_per_block; i += blockDim.x) {
        dst[i] = src[i];
    }
}
