// Matrix products and convolutions as tiled GEMMs: C[m][n] = sum_k A[m][k] * B[k][n] (+ bias).
//
// Compile-time options (-D):
//   TM, TN, TK   the work-group's tile: TM x TN outputs, TK of the contracted dim per step
//   WM, WN       outputs per work-item (the work-group is (TN/WN, TM/WM, 1))
//   PAD_MODE     convolutions: 0 zeros, 1 reflect, 2 replicate, 3 circular
//   ACT          convolutions: the activation fused into the store (conv_activation.cl)
//   STORE_ARGS, STORE_VALUE(v, i)   defined by a chain of elementwise operators fused after the
//                product (ops/chain.py): its extra kernel arguments, and the value stored for
//                output element i (its index in C, which is contiguous); by default v
//   LOAD_ARGS, LOAD_VALUE(v, plane)  convolutions: an excitation gate folded into the reads
//                (ops/excitation.py; conv_common.cl); by default v
//
// matmul_*: A and B are strided ((m, k) and (k, n) element strides), over up to three
//   broadcast batch dims (dim 2 of the grid); C is contiguous (batch, M, N).
// conv_*:   an implicit GEMM (no im2col buffer). For group g (dim 2 of the grid):
//   A = weight (Cout, Cg*kh*kw) rows g*M .. g*M+M-1; B[k][n] is gathered from the input
//   (N, Cin, H, W) with k = (c, i, j) read from a per-layer table `ktab` (c, i*dh, j*dw)
//   and n = (image, oy, ox) over every image of the batch; C is (N, Cout, Ho, Wo).
// *_naive: one output per work-item (for products with few rows, where a tile would idle).

#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 16
#endif
#ifndef WM
#define WM 4
#endif
#ifndef WN
#define WN 4
#endif

// PAD_MODE, STORE_ARGS, STORE_VALUE, LOAD_ARGS, LOAD_VALUE and pad_index:
#include "conv_common.cl"

#define THREADS_M (TM / WM)
#define THREADS_N (TN / WN)
#define THREADS (THREADS_M * THREADS_N)
// B-tile elements each work-item loads per step (THREADS divides TN * TK by construction).
#define B_SLOTS ((TK * TN) / THREADS)

// The tile's inner loop: every work-item multiplies its WM rows of As by its WN columns of Bs.
#define TILE_PRODUCT                                                              \
    for (int kk = 0; kk < TK; ++kk) {                                             \
        float a[WM], b[WN];                                                       \
        for (int i = 0; i < WM; ++i) a[i] = As[kk][tm + i * THREADS_M];           \
        for (int j = 0; j < WN; ++j) b[j] = Bs[kk][tn + j * THREADS_N];           \
        for (int i = 0; i < WM; ++i)                                              \
            for (int j = 0; j < WN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);  \
    }

// ---------------------------------------------------------------------------------------
// matmul
// ---------------------------------------------------------------------------------------
#define MATMUL_ARGS                                                                      \
    __global const float* restrict A, const int a_off, const int a_sm, const int a_sk,   \
    __global const float* restrict B, const int b_off, const int b_sk, const int b_sn,   \
    __global const float* restrict bias, const int bias_off, const int bias_sm,          \
    const int bias_sn, const int has_bias,                                               \
    __global float* restrict C, const int c_off,                                         \
    const int M, const int N, const int K, const int nb1, const int nb2,                 \
    const int a_s0, const int a_s1, const int a_s2,                                      \
    const int b_s0, const int b_s1, const int b_s2 STORE_ARGS

#define MATMUL_SETUP                                                                     \
    const int z = get_global_id(2);                                                      \
    const int i0 = z / (nb1 * nb2), i1 = (z / nb2) % nb1, i2 = z % nb2;                  \
    const int a_base = a_off + i0 * a_s0 + i1 * a_s1 + i2 * a_s2;                        \
    const int b_base = b_off + i0 * b_s0 + i1 * b_s1 + i2 * b_s2;                        \
    const int c_base = c_off + z * M * N;

#define MATMUL_STORE(m, n, v)                                                            \
    C[c_base + (m) * N + (n)] = STORE_VALUE(                                             \
        (v) + (has_bias ? bias[bias_off + (m) * bias_sm + (n) * bias_sn] : 0.0f),        \
        c_base - c_off + (m) * N + (n))

__kernel __attribute__((reqd_work_group_size(THREADS_N, THREADS_M, 1)))
void matmul_tiled(MATMUL_ARGS) {
    MATMUL_SETUP
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int tid = tm * THREADS_N + tn;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    __local float As[TK][TM + 1];
    __local float Bs[TK][TN];
    float acc[WM][WN];
    for (int i = 0; i < WM; ++i)
        for (int j = 0; j < WN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int l = tid; l < TM * TK; l += THREADS) {
            const int kk = l % TK, mm = l / TK;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? A[a_base + m * a_sm + k * a_sk] : 0.0f;
        }
        for (int l = tid; l < TN * TK; l += THREADS) {
            const int nn = l % TN, kk = l / TN;
            const int n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? B[b_base + k * b_sk + n * b_sn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_PRODUCT
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < WM; ++i) {
        const int m = m0 + tm + i * THREADS_M;
        for (int j = 0; j < WN; ++j) {
            const int n = n0 + tn + j * THREADS_N;
            if (m < M && n < N) MATMUL_STORE(m, n, acc[i][j]);
        }
    }
}

__kernel void matmul_naive(MATMUL_ARGS) {
    MATMUL_SETUP
    const int n = get_global_id(0), m = get_global_id(1);
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = mad(A[a_base + m * a_sm + k * a_sk], B[b_base + k * b_sk + n * b_sn], acc);
    MATMUL_STORE(m, n, acc);
}

// ---------------------------------------------------------------------------------------
// convolution
// ---------------------------------------------------------------------------------------
// The offsets and sizes travel as one argument: the driver's cost of a launch grows with
// its argument count (docs/design/opencl_replay.md). ConvOp packs them in this order.
typedef struct {
    int a_off, x_off, bias_off, has_bias, c_off, M, N, K, Cin, Cg, H, W, Cout, Ho, Wo, sh, sw, ph, pw;
} ConvDims;

#define CONV_ARGS                                                                        \
    __global const float* restrict A, __global const float* restrict X,                  \
    __global const int4* restrict ktab, __global const float* restrict bias,             \
    __global float* restrict C, const ConvDims d LOAD_ARGS STORE_ARGS

#define CONV_SETUP                                                                       \
    const int a_off = d.a_off, x_off = d.x_off, bias_off = d.bias_off;                   \
    const int has_bias = d.has_bias, c_off = d.c_off, M = d.M, N = d.N, K = d.K;         \
    const int Cin = d.Cin, Cg = d.Cg, H = d.H, W = d.W, Cout = d.Cout;                   \
    const int Ho = d.Ho, Wo = d.Wo, sh = d.sh, sw = d.sw, ph = d.ph, pw = d.pw;          \
    const int g = get_global_id(2);                                                      \
    const int HW = H * W, HoWo = Ho * Wo;                                                \
    const int a_base = a_off + g * M * K;                                                \
    const int x_base = x_off + g * Cg * HW;                                              \
    const int g_plane = g * Cg;

// The input value B[k][n] for an output pixel whose image base, top row and left column
// are known: `image` = x_base + image * Cin * H * W, (y0, x0) = (oy*sh - ph, ox*sw - pw).
inline float conv_gather(__global const float* restrict X, const int4 t, const int image,
                         const int y0, const int x0, const int H, const int W, const int HW) {
    int iy = y0 + t.y, ix = x0 + t.z;
#if PAD_MODE == 0
    if (iy < 0 || iy >= H || ix < 0 || ix >= W) return 0.0f;
#else
    iy = pad_index(iy, H);
    ix = pad_index(ix, W);
#endif
    return X[image + t.x * HW + iy * W + ix];
}

#include "conv_activation.cl"

#define CONV_STORE(m, n, v) {                                                            \
        const int oc = g * M + (m);                                                      \
        const int b = (n) / HoWo, p = (n) - b * HoWo;                                    \
        const int at = (b * Cout + oc) * HoWo + p;                                       \
        C[c_off + at] = conv_activation(STORE_VALUE((v) + (has_bias ? bias[bias_off + oc] : 0.0f), at)); }

__kernel __attribute__((reqd_work_group_size(THREADS_N, THREADS_M, 1)))
void conv_tiled(CONV_ARGS) {
    CONV_SETUP
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int tid = tm * THREADS_N + tn;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    __local float As[TK][TM + 1];
    __local float Bs[TK][TN];
    // Each work-item loads the same B columns at every step: decompose them once.
    int image[B_SLOTS], plane[B_SLOTS], top[B_SLOTS], left[B_SLOTS];
    for (int r = 0; r < B_SLOTS; ++r) {
        const int n = n0 + (tid + r * THREADS) % TN;
        const int b = n / HoWo, p = n - b * HoWo;
        const int oy = p / Wo, ox = p - oy * Wo;
        image[r] = n < N ? x_base + b * Cin * HW : -1;
        plane[r] = b * Cin + g_plane;
        top[r] = oy * sh - ph;
        left[r] = ox * sw - pw;
    }
    float acc[WM][WN];
    for (int i = 0; i < WM; ++i)
        for (int j = 0; j < WN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int l = tid; l < TM * TK; l += THREADS) {
            const int kk = l % TK, mm = l / TK;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? A[a_base + m * K + k] : 0.0f;
        }
        for (int r = 0; r < B_SLOTS; ++r) {
            const int l = tid + r * THREADS;
            const int nn = l % TN, kk = l / TN;
            const int k = k0 + kk;
            // Without a gate LOAD_VALUE is its value: the same expression as a plain read.
            Bs[kk][nn] = (image[r] >= 0 && k < K)
                ? LOAD_VALUE(conv_gather(X, ktab[k], image[r], top[r], left[r], H, W, HW), plane[r] + ktab[k].x)
                : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_PRODUCT
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < WM; ++i) {
        const int m = m0 + tm + i * THREADS_M;
        for (int j = 0; j < WN; ++j) {
            const int n = n0 + tn + j * THREADS_N;
            if (m < M && n < N) CONV_STORE(m, n, acc[i][j]);
        }
    }
}

__kernel void conv_naive(CONV_ARGS) {
    CONV_SETUP
    const int n = get_global_id(0), m = get_global_id(1);
    if (m >= M || n >= N) return;
    const int b = n / HoWo, p = n - b * HoWo;
    const int oy = p / Wo, ox = p - oy * Wo;
    const int image = x_base + b * Cin * HW, plane = b * Cin + g_plane, y0 = oy * sh - ph, x0 = ox * sw - pw;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = mad(A[a_base + m * K + k],
                  LOAD_VALUE(conv_gather(X, ktab[k], image, y0, x0, H, W, HW), plane + ktab[k].x), acc);
    CONV_STORE(m, n, acc);
}
