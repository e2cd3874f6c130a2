// Sum, mean, max and min of x viewed as (outer, n, inner), into y (outer, inner); n >= 1.
// mode: 0 sum, 1 mean, 2 max, 3 min. Max and min give NaN where a reduced element is NaN,
// as PyTorch's amax and amin do (fmax alone would skip it).
// reduce_rows: inner == 1, one work-group of LOCAL work-items per output, a tree in local memory.
// reduce_columns: inner > 1, one work-item per output; neighbouring work-items read neighbours.

#ifndef LOCAL
#define LOCAL 64
#endif

// Sums in the columns kernel add blocks of this many terms before adding to the total, so
// the rounding error grows with n / BLOCK + BLOCK rather than with n.
#define BLOCK 64

inline float pick(const float a, const float b, const int mode) {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return mode == 2 ? fmax(a, b) : fmin(a, b);
}

inline float identity(const int mode) {
    return mode == 2 ? -INFINITY : (mode == 3 ? INFINITY : 0.0f);
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void reduce_rows(__global const float* restrict x, const int x_off,
                 __global float* restrict y, const int y_off, const int n, const int mode) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * n;
    float acc = identity(mode);
    if (mode < 2) {
        for (int i = lid; i < n; i += LOCAL) acc += src[i];
    } else {
        for (int i = lid; i < n; i += LOCAL) acc = pick(acc, src[i], mode);
    }
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = LOCAL / 2; step > 0; step >>= 1) {
        if (lid < step) part[lid] = mode < 2 ? part[lid] + part[lid + step] : pick(part[lid], part[lid + step], mode);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) y[y_off + row] = mode == 1 ? part[0] / (float)n : part[0];
}

__kernel void reduce_columns(__global const float* restrict x, const int x_off,
                             __global float* restrict y, const int y_off,
                             const int outputs, const int n, const int inner, const int mode) {
    const int id = get_global_id(0);
    if (id >= outputs) return;
    const int o = id / inner, in = id - o * inner;
    __global const float* src = x + x_off + o * n * inner + in;
    float acc = identity(mode);
    if (mode < 2) {
        for (int start = 0; start < n; start += BLOCK) {
            const int stop = min(n, start + BLOCK);
            float block = 0.0f;
            for (int i = start; i < stop; ++i) block += src[i * inner];
            acc += block;
        }
    } else {
        for (int i = 0; i < n; ++i) acc = pick(acc, src[i * inner], mode);
    }
    y[y_off + id] = mode == 1 ? acc / (float)n : acc;
}
