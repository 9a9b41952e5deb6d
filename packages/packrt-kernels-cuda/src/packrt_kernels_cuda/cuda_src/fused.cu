// packrt's fused CUDA kernels: row-wise norms, softmax (plain and attention-masked),
// activations, bias + activation, and int8 weight-only linear helpers.
//
// Self-contained on purpose: no #include, every entry point extern "C", so the same file
// compiles under NVRTC at run time (cupy.RawModule, once per process) and under
// `nvcc -arch=sm_90` in the CPU-side compile test. Half types are carried as 16-bit words
// and converted with PTX (float16) or bit arithmetic (bfloat16), so neither <cuda_fp16.h>
// nor <cuda_bf16.h> is needed. All arithmetic runs in float32 and rounds once on the store.
//
// Entry points come in three flavours per kernel, suffixed _f32, _f16 and _bf16 (the
// storage type of the activations); weights, biases and scales are always float32.

typedef unsigned short pk_u16;

__device__ __forceinline__ float pk_f16_to_f32(pk_u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ pk_u16 pk_f32_to_f16(float f) {
    pk_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float pk_bf16_to_f32(pk_u16 b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// Round to nearest even, as ml_dtypes does; NaN stays a (quiet) NaN with its sign.
__device__ __forceinline__ pk_u16 pk_f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (pk_u16)((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (pk_u16)(u >> 16);
}

struct PkF32 {
    typedef float storage;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};

struct PkF16 {
    typedef pk_u16 storage;
    static __device__ __forceinline__ float load(pk_u16 v) { return pk_f16_to_f32(v); }
    static __device__ __forceinline__ pk_u16 store(float v) { return pk_f32_to_f16(v); }
};

struct PkBF16 {
    typedef pk_u16 storage;
    static __device__ __forceinline__ float load(pk_u16 v) { return pk_bf16_to_f32(v); }
    static __device__ __forceinline__ pk_u16 store(float v) { return pk_f32_to_bf16(v); }
};

__device__ __forceinline__ float pk_neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float pk_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float pk_warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

// Block-wide reductions; every thread of the block must call them (they synchronize).
// `scratch` holds 33 floats: one per warp plus the broadcast slot.
__device__ float pk_block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = pk_warp_sum(v);
    __syncthreads();  // the previous reduction has finished reading the scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : 0.0f;
        w = pk_warp_sum(w);
        if (lane == 0) scratch[32] = w;
    }
    __syncthreads();
    return scratch[32];
}

__device__ float pk_block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = pk_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : pk_neg_inf();
        w = pk_warp_max(w);
        if (lane == 0) scratch[32] = w;
    }
    __syncthreads();
    return scratch[32];
}

// ---- LayerNorm / RMSNorm: one block per row of `width` elements ------------------------------

template <class IO>
__device__ void pk_layer_norm(const typename IO::storage* x, const float* w, const float* b,
                              typename IO::storage* y, int width, float eps, int has_w, int has_b) {
    __shared__ float scratch[33];
    const long long base = (long long)blockIdx.x * width;
    float s = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) s += IO::load(x[base + i]);
    const float mean = pk_block_sum(s, scratch) / (float)width;
    float q = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float d = IO::load(x[base + i]) - mean;
        q += d * d;
    }
    const float denom = sqrtf(pk_block_sum(q, scratch) / (float)width + eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = (IO::load(x[base + i]) - mean) / denom;
        if (has_w) v *= w[i];
        if (has_b) v += b[i];
        y[base + i] = IO::store(v);
    }
}

template <class IO>
__device__ void pk_rms_norm(const typename IO::storage* x, const float* w, typename IO::storage* y, int width,
                            float eps, int has_w) {
    __shared__ float scratch[33];
    const long long base = (long long)blockIdx.x * width;
    float s = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float v = IO::load(x[base + i]);
        s += v * v;
    }
    const float denom = sqrtf(pk_block_sum(s, scratch) / (float)width + eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = IO::load(x[base + i]) / denom;
        if (has_w) v *= w[i];
        y[base + i] = IO::store(v);
    }
}

// ---- softmax over the last axis: one block per row -------------------------------------------

// Plain softmax, max-shifted; a row of all -inf gives NaN, as torch does.
template <class IO>
__device__ void pk_softmax(const typename IO::storage* x, typename IO::storage* y, int width) {
    __shared__ float scratch[33];
    const long long base = (long long)blockIdx.x * width;
    float m = pk_neg_inf();
    for (int i = threadIdx.x; i < width; i += blockDim.x) m = fmaxf(m, IO::load(x[base + i]));
    const float top = pk_block_max(m, scratch);
    float s = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) s += expf(IO::load(x[base + i]) - top);
    const float total = pk_block_sum(s, scratch);
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        y[base + i] = IO::store(expf(IO::load(x[base + i]) - top) / total);
    }
}

// Attention weights in place on float32 scores (rows = batch * L, each of S keys): scale, then
// (when causal) hide key j > i for query i = row % L (top-left aligned, as torch), then softmax.
// A query that sees no key (everything masked) gets zeros rather than NaN.
extern "C" __global__ void pk_attention_softmax(float* scores, int length, int source, float scale, int causal) {
    __shared__ float scratch[33];
    const long long base = (long long)blockIdx.x * source;
    const int query = (int)(blockIdx.x % (unsigned int)length);
    const int visible = (causal && query + 1 < source) ? query + 1 : source;
    float m = pk_neg_inf();
    for (int j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, scores[base + j] * scale);
    float top = pk_block_max(m, scratch);
    const bool empty = !(top > pk_neg_inf());  // no visible key, or all of them -inf
    if (empty) top = 0.0f;
    float s = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) s += expf(scores[base + j] * scale - top);
    float total = pk_block_sum(s, scratch);
    if (total == 0.0f) total = 1.0f;
    for (int j = threadIdx.x; j < source; j += blockDim.x) {
        scores[base + j] = (j < visible && !empty) ? expf(scores[base + j] * scale - top) / total : 0.0f;
    }
}

// ---- activations (grid-stride over n elements) -----------------------------------------------

#define PK_ACT_IDENTITY 0
#define PK_ACT_RELU 1
#define PK_ACT_GELU 2
#define PK_ACT_GELU_TANH 3
#define PK_ACT_SILU 4

__device__ __forceinline__ float pk_activate(float v, int kind) {
    switch (kind) {
        case PK_ACT_RELU:
            return v > 0.0f ? v : (v == v ? 0.0f : v);  // NaN stays NaN
        case PK_ACT_GELU:
            return 0.5f * v * erfcf(v * -0.70710678118654752f);
        case PK_ACT_GELU_TANH: {
            const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
            return 0.5f * v * (1.0f + tanhf(inner));
        }
        case PK_ACT_SILU: {
            const float e = expf(-fabsf(v));  // never overflows
            return v * (v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));
        }
        default:
            return v;
    }
}

template <class IO>
__device__ void pk_act(const typename IO::storage* x, typename IO::storage* y, long long n, int kind) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = IO::store(pk_activate(IO::load(x[i]), kind));
    }
}

// y = act(x + b[i % width]); x and y may be the same array (in place after a GEMM).
template <class IO>
__device__ void pk_bias_act(const typename IO::storage* x, const float* b, typename IO::storage* y, long long n,
                            int width, int kind) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = IO::store(pk_activate(IO::load(x[i]) + b[i % width], kind));
    }
}

// ---- int8 weight-only linear -----------------------------------------------------------------

#define PK_QGEMV_MAX_ROWS 16

// y (M, N) = (x (M, K) @ q (N, K)^T) * scale[N] (+ bias[N]) for M <= PK_QGEMV_MAX_ROWS: one warp per
// output column. The int8 row is read once, four weights per 32-bit load when `vector4` (the caller
// checked K % 4 == 0 and a 4-byte aligned q), and converted in registers: the weight is never
// dequantized to memory.
template <class IO>
__device__ void pk_qgemv(const typename IO::storage* x, const signed char* q, const float* scale, const float* bias,
                         typename IO::storage* y, int rows, int cols, int depth, int has_bias, int vector4) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= cols) return;  // the whole warp leaves together; nothing below synchronizes the block
    const signed char* qr = q + (long long)n * depth;
    float acc[PK_QGEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < PK_QGEMV_MAX_ROWS; ++m) acc[m] = 0.0f;
    if (vector4) {
        const int* q4 = (const int*)qr;
        for (int j = lane; j < (depth >> 2); j += 32) {
            const int packed = q4[j];
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const float w = (float)(signed char)((packed >> (8 * t)) & 0xff);
                const int k = 4 * j + t;
#pragma unroll
                for (int m = 0; m < PK_QGEMV_MAX_ROWS; ++m) {
                    if (m < rows) acc[m] += IO::load(x[(long long)m * depth + k]) * w;
                }
            }
        }
    } else {
        for (int k = lane; k < depth; k += 32) {
            const float w = (float)qr[k];
#pragma unroll
            for (int m = 0; m < PK_QGEMV_MAX_ROWS; ++m) {
                if (m < rows) acc[m] += IO::load(x[(long long)m * depth + k]) * w;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < PK_QGEMV_MAX_ROWS; ++m) {
        if (m < rows) {
            const float total = pk_warp_sum(acc[m]);
            if (lane == 0) {
                float v = total * scale[n];
                if (has_bias) v += bias[n];
                y[(long long)m * cols + n] = IO::store(v);
            }
        }
    }
}

// One block of int8 rows dequantized for a cuBLAS GEMM: out[r, c] = q[r, c] * scale[r] in the GEMM's
// dtype, for `rows` rows of `depth` starting at row `row0` (the scratch holds only this block).
template <class IO>
__device__ void pk_dequant_rows(const signed char* q, const float* scale, typename IO::storage* out, int row0,
                                int rows, int depth) {
    const long long n = (long long)rows * depth;
    const long long stride = (long long)blockDim.x * gridDim.x;
    const long long offset = (long long)row0 * depth;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = IO::store((float)q[offset + i] * scale[row0 + i / depth]);
    }
}

// ---- extern "C" entry points, one per storage type ---------------------------------------------

#define PK_ENTRY_POINTS(SUFFIX, IO)                                                                        \
    extern "C" __global__ void pk_layer_norm_##SUFFIX(const IO::storage* x, const float* w, const float* b,  \
                                                     IO::storage* y, int width, float eps, int has_w,        \
                                                     int has_b) {                                            \
        pk_layer_norm<IO>(x, w, b, y, width, eps, has_w, has_b);                                             \
    }                                                                                                        \
    extern "C" __global__ void pk_rms_norm_##SUFFIX(const IO::storage* x, const float* w, IO::storage* y,     \
                                                   int width, float eps, int has_w) {                        \
        pk_rms_norm<IO>(x, w, y, width, eps, has_w);                                                         \
    }                                                                                                        \
    extern "C" __global__ void pk_softmax_##SUFFIX(const IO::storage* x, IO::storage* y, int width) {         \
        pk_softmax<IO>(x, y, width);                                                                         \
    }                                                                                                        \
    extern "C" __global__ void pk_act_##SUFFIX(const IO::storage* x, IO::storage* y, long long n, int kind) { \
        pk_act<IO>(x, y, n, kind);                                                                           \
    }                                                                                                        \
    extern "C" __global__ void pk_bias_act_##SUFFIX(const IO::storage* x, const float* b, IO::storage* y,     \
                                                   long long n, int width, int kind) {                       \
        pk_bias_act<IO>(x, b, y, n, width, kind);                                                            \
    }                                                                                                        \
    extern "C" __global__ void pk_qgemv_##SUFFIX(const IO::storage* x, const signed char* q,                  \
                                                const float* scale, const float* bias, IO::storage* y,       \
                                                int rows, int cols, int depth, int has_bias, int vector4) {  \
        pk_qgemv<IO>(x, q, scale, bias, y, rows, cols, depth, has_bias, vector4);                            \
    }                                                                                                        \
    extern "C" __global__ void pk_dequant_rows_##SUFFIX(const signed char* q, const float* scale,             \
                                                       IO::storage* out, int row0, int rows, int depth) {    \
        pk_dequant_rows<IO>(q, scale, out, row0, rows, depth);                                               \
    }

PK_ENTRY_POINTS(f32, PkF32)
PK_ENTRY_POINTS(f16, PkF16)
PK_ENTRY_POINTS(bf16, PkBF16)
