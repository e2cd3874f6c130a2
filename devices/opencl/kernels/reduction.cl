// Sum, mean, max, min and vector norms of x viewed as (outer, n, inner), into y (outer,
// inner); n >= 1. mode: 0 sum, 1 mean, 2 max, 3 min, 4 2-norm, 5 1-norm, 6 inf-norm (the
// largest magnitude), 7 -inf-norm (the smallest). Max and min give NaN where a reduced
// element is NaN, as PyTorch's amax and amin do (fmax alone would skip it).
// reduce_rows: inner == 1, one work-group of LOCAL work-items per output, a tree in local memory.
// reduce_columns: inner > 1, one work-item per output; neighbouring work-items read neighbours.
// divide_by_norm: y = x / max(norm, eps), the norm of x's line (F.normalize).

#ifndef LOCAL
#define LOCAL 64
#endif

// Sums in the columns kernel add blocks of this many terms before adding to the total, so
// the rounding error grows with n / BLOCK + BLOCK rather than with n.
#define BLOCK 64

// Whether a mode adds its terms up (else it keeps the largest or smallest).
#define SUMS(mode) ((mode) < 2 || (mode) == 4 || (mode) == 5)
// The largest for max and the inf-norm, the smallest for min and the -inf-norm.
#define LARGEST(mode) ((mode) == 2 || (mode) == 6)

inline float pick(const float a, const float b, const int mode) {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return LARGEST(mode) ? fmax(a, b) : fmin(a, b);
}

inline float identity(const int mode) {
    return SUMS(mode) ? 0.0f : (LARGEST(mode) ? -INFINITY : INFINITY);
}

// What a mode reduces of an element: its square (2-norm), its magnitude (the other norms).
inline float term(const float v, const int mode) {
    return mode == 4 ? v * v : (mode > 4 ? fabs(v) : v);
}

// The reduction's last step: the mean's division, the 2-norm's root.
inline float finished(const float acc, const int n, const int mode) {
    return mode == 1 ? acc / (float)n : (mode == 4 ? sqrt(acc) : acc);
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void reduce_rows(__global const float* restrict x, const int x_off,
                 __global float* restrict y, const int y_off, const int n, const int mode) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * n;
    float acc = identity(mode);
    if (SUMS(mode)) {
        for (int i = lid; i < n; i += LOCAL) acc += term(src[i], mode);
    } else {
        for (int i = lid; i < n; i += LOCAL) acc = pick(acc, term(src[i], mode), mode);
    }
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = LOCAL / 2; step > 0; step >>= 1) {
        if (lid < step) part[lid] = SUMS(mode) ? part[lid] + part[lid + step] : pick(part[lid], part[lid + step], mode);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) y[y_off + row] = finished(part[0], n, mode);
}

__kernel void reduce_columns(__global const float* restrict x, const int x_off,
                             __global float* restrict y, const int y_off,
                             const int outputs, const int n, const int inner, const int mode) {
    const int id = get_global_id(0);
    if (id >= outputs) return;
    const int o = id / inner, in = id - o * inner;
    __global const float* src = x + x_off + o * n * inner + in;
    float acc = identity(mode);
    if (SUMS(mode)) {
        for (int start = 0; start < n; start += BLOCK) {
            const int stop = min(n, start + BLOCK);
            float block = 0.0f;
            for (int i = start; i < stop; ++i) block += term(src[i * inner], mode);
            acc += block;
        }
    } else {
        for (int i = 0; i < n; ++i) acc = pick(acc, term(src[i * inner], mode), mode);
    }
    y[y_off + id] = finished(acc, n, mode);
}

__kernel void divide_by_norm(__global const float* restrict x, const int x_off, __global const float* restrict norm,
                             const int norm_off, __global float* restrict y, const int y_off, const int total,
                             const int n, const int inner, const float eps) {
    const int id = get_global_id(0);
    if (id >= total) return;
    const int in = id % inner, o = id / (n * inner);
    const float v = norm[norm_off + o * inner + in];
    y[y_off + id] = x[x_off + id] / (v > eps || isnan(v) ? v : eps);  // NaN stays, as numpy's maximum keeps it
}
