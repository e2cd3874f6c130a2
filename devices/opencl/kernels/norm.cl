// Norms over rows of n elements: layer norm, y = (x - mean) / sqrt(var + eps) * weight +
// bias, the variance biased (over n) and taken around the mean in a second pass, as the CPU
// layer does; group norm, the same with a weight and bias a channel; RMS norm. One
// work-group of LOCAL work-items (a power of two) per row; sums as trees in local memory.

#ifndef LOCAL
#define LOCAL 64
#endif

#include "groups.cl"

// (mean, 1 / sqrt(var + eps)) of a row of n elements, the whole work-group taking part.
inline float2 row_stats(__global const float* src, const int n, const float eps, __local float* part, const int lid) {
    float s = 0.0f;
    for (int i = lid; i < n; i += LOCAL) s += src[i];
    const float mean = group_sum(part, s, lid) / (float)n;
    float q = 0.0f;
    for (int i = lid; i < n; i += LOCAL) {
        const float d = src[i] - mean;
        q += d * d;
    }
    return (float2)(mean, rsqrt(group_sum(part, q, lid) / (float)n + eps));
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void layer_norm_rows(__global const float* restrict x, const int x_off,
                     __global float* restrict y, const int y_off,
                     __global const float* restrict weight, __global const float* restrict bias,
                     const int n, const float eps) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * n;
    __global float* dst = y + y_off + row * n;
    const float2 stats = row_stats(src, n, eps, part, lid);
    for (int i = lid; i < n; i += LOCAL) dst[i] = (src[i] - stats.x) * stats.y * weight[i] + bias[i];
}

// Group norm (and instance norm, a group a channel): each row is one sample's group of
// channels, n = hw * the channels of a group; y = (x - mean) / sqrt(var + eps) * weight[c]
// + bias[c], c the element's channel, (row % groups) * (n / hw) + i / hw.
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void group_norm_rows(__global const float* restrict x, const int x_off,
                     __global float* restrict y, const int y_off,
                     __global const float* restrict weight, const int w_off,
                     __global const float* restrict bias, const int b_off,
                     const int n, const int hw, const int groups, const float eps) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * n;
    __global float* dst = y + y_off + row * n;
    const float2 stats = row_stats(src, n, eps, part, lid);
    const int first = (row % groups) * (n / hw);
    for (int i = lid; i < n; i += LOCAL) {
        const int c = first + i / hw;
        dst[i] = (src[i] - stats.x) * stats.y * weight[w_off + c] + bias[b_off + c];
    }
}

// Root-mean-square norm over rows of n elements: y = x / sqrt(mean(x^2) + eps) * weight.
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void rms_norm_rows(__global const float* restrict x, const int x_off, __global float* restrict y, const int y_off,
                   __global const float* restrict weight, const int w_off, const int n, const float eps) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + row * n;
    __global float* dst = y + y_off + row * n;
    float q = 0.0f;
    for (int i = lid; i < n; i += LOCAL) q += src[i] * src[i];
    const float inv = 1.0f / sqrt(group_sum(part, q, lid) / (float)n + eps);
    for (int i = lid; i < n; i += LOCAL) dst[i] = src[i] * inv * weight[w_off + i];
}
