// Softmax family along one dim of x viewed as (outer, L, inner).
// mode: 0 softmax, 1 log_softmax, 2 softmin (softmax of -x).
// softmax_rows: inner == 1, one work-group per row (LOCAL work-items, a power of two).
// softmax_strided: one work-item per (outer, inner) line.

#ifndef LOCAL
#define LOCAL 64
#endif

#include "groups.cl"

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void softmax_rows(__global const float* restrict x, const int x_off,
                  __global float* restrict y, const int y_off, const int L, const int mode) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * L;
    __global float* dst = y + y_off + row * L;
    const float sign = mode == 2 ? -1.0f : 1.0f;
    float m = -INFINITY;
    for (int i = lid; i < L; i += LOCAL) m = fmax(m, sign * src[i]);
    m = group_max(part, m, lid);
    float s = 0.0f;
    for (int i = lid; i < L; i += LOCAL) s += exp(sign * src[i] - m);
    s = group_sum(part, s, lid);
    if (mode == 1) {
        const float logs = log(s);
        for (int i = lid; i < L; i += LOCAL) dst[i] = (src[i] - m) - logs;
    } else {
        const float inv = 1.0f / s;
        for (int i = lid; i < L; i += LOCAL) dst[i] = exp(sign * src[i] - m) * inv;
    }
}

__kernel void softmax_strided(__global const float* restrict x, const int x_off,
                              __global float* restrict y, const int y_off,
                              const int lines, const int L, const int inner, const int mode) {
    const int id = get_global_id(0);
    if (id >= lines) return;
    const int o = id / inner, in = id - o * inner;
    __global const float* src = x + x_off + o * L * inner + in;
    __global float* dst = y + y_off + o * L * inner + in;
    const float sign = mode == 2 ? -1.0f : 1.0f;
    float m = -INFINITY;
    for (int i = 0; i < L; ++i) m = fmax(m, sign * src[i * inner]);
    float s = 0.0f;
    for (int i = 0; i < L; ++i) s += exp(sign * src[i * inner] - m);
    if (mode == 1) {
        const float logs = log(s);
        for (int i = 0; i < L; ++i) dst[i * inner] = (src[i * inner] - m) - logs;
    } else {
        const float inv = 1.0f / s;
        for (int i = 0; i < L; ++i) dst[i * inner] = exp(sign * src[i * inner] - m) * inv;
    }
}

// Attention weights in place: each row of scores s (rows of L) becomes
// softmax(s * scale + the row's masks). Two masks, each of a kind: 0 none (its buffers are
// then any, never read), 1 float (added), 2 boolean (one byte per element, nonzero: -inf).
// The attention mask's row is row % mask_rows (an (L, S) mask repeats every L rows, an
// (N * heads, L, S) one has a row per row); the key padding mask's is row / pad_rows (one
// row per batch item, whose heads * L rows share it). The float and boolean pointers of a
// mask are the same buffer, read as its kind says. A row whose every score is -inf gives
// NaN, as the CPU layer and PyTorch's module give.
inline float mask_term(__global const float* f, __global const uchar* b, const int at, const int kind) {
    if (kind == 1) return f[at];
    return kind == 2 && b[at] ? -INFINITY : 0.0f;
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void attention_softmax(__global float* s, const int s_off, const int L, const float scale,
                       __global const float* mask_f, __global const uchar* mask_b, const int mask_off,
                       const int mask_rows, const int mask_kind,
                       __global const float* pad_f, __global const uchar* pad_b, const int pad_off,
                       const int pad_rows, const int pad_kind) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global float* x = s + s_off + row * L;
    const int mask_at = mask_off + (row % mask_rows) * L, pad_at = pad_off + (row / pad_rows) * L;
    float m = -INFINITY;
    for (int i = lid; i < L; i += LOCAL) {
        const float v = x[i] * scale + mask_term(mask_f, mask_b, mask_at + i, mask_kind)
                        + mask_term(pad_f, pad_b, pad_at + i, pad_kind);
        x[i] = v;
        m = fmax(m, v);
    }
    m = group_max(part, m, lid);
    float total = 0.0f;
    for (int i = lid; i < L; i += LOCAL) total += exp(x[i] - m);
    const float inv = 1.0f / group_sum(part, total, lid);
    for (int i = lid; i < L; i += LOCAL) x[i] = exp(x[i] - m) * inv;
}
