// 2-D pooling over (planes, H, W), one work-item per output element (1-D pooling runs
// with H == 1). Windows follow PyTorch: padding never wins a max (it is -inf), a NaN does;
// the average divides by divisor_override, or by the window clipped to input + padding
// (count_include_pad) or to the input alone.

__kernel void max_pool2d(__global const float* restrict x, const int x_off,
                         __global float* restrict y, const int y_off, const int total,
                         const int H, const int W, const int Ho, const int Wo,
                         const int kh, const int kw, const int sh, const int sw,
                         const int ph, const int pw, const int dh, const int dw) {
    const int idx = get_global_id(0);
    if (idx >= total) return;
    const int ox = idx % Wo;
    const int t = idx / Wo;
    const int oy = t % Ho;
    const int plane = t / Ho;
    __global const float* src = x + x_off + plane * H * W;
    float best = -INFINITY;
    for (int i = 0; i < kh; ++i) {
        const int iy = oy * sh - ph + i * dh;
        if (iy < 0 || iy >= H) continue;
        for (int j = 0; j < kw; ++j) {
            const int ix = ox * sw - pw + j * dw;
            if (ix < 0 || ix >= W) continue;
            const float v = src[iy * W + ix];
            if (v > best || isnan(v)) best = v;
        }
    }
    y[y_off + idx] = best;
}

// divisor > 0: divisor_override; else include_pad selects the divisor.
__kernel void avg_pool2d(__global const float* restrict x, const int x_off,
                         __global float* restrict y, const int y_off, const int total,
                         const int H, const int W, const int Ho, const int Wo,
                         const int kh, const int kw, const int sh, const int sw,
                         const int ph, const int pw, const int include_pad, const int divisor) {
    const int idx = get_global_id(0);
    if (idx >= total) return;
    const int ox = idx % Wo;
    const int t = idx / Wo;
    const int oy = t % Ho;
    const int plane = t / Ho;
    int y0 = oy * sh - ph, x0 = ox * sw - pw;
    int y1 = min(y0 + kh, H + ph), x1 = min(x0 + kw, W + pw);
    const int padded = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0); x0 = max(x0, 0);
    y1 = min(y1, H); x1 = min(x1, W);
    __global const float* src = x + x_off + plane * H * W;
    float sum = 0.0f;
    for (int iy = y0; iy < y1; ++iy)
        for (int ix = x0; ix < x1; ++ix) sum += src[iy * W + ix];
    const int count = divisor > 0 ? divisor : (include_pad ? padded : (y1 - y0) * (x1 - x0));
    y[y_off + idx] = sum / (float)count;
}

// PyTorch's adaptive bins: start = floor(o * in / out), end = ceil((o + 1) * in / out).
__kernel void adaptive_pool2d(__global const float* restrict x, const int x_off,
                              __global float* restrict y, const int y_off, const int total,
                              const int H, const int W, const int Ho, const int Wo,
                              const int use_max) {
    const int idx = get_global_id(0);
    if (idx >= total) return;
    const int ox = idx % Wo;
    const int t = idx / Wo;
    const int oy = t % Ho;
    const int plane = t / Ho;
    const int y0 = (oy * H) / Ho, y1 = ((oy + 1) * H + Ho - 1) / Ho;
    const int x0 = (ox * W) / Wo, x1 = ((ox + 1) * W + Wo - 1) / Wo;
    __global const float* src = x + x_off + plane * H * W;
    float acc = use_max ? -INFINITY : 0.0f;
    for (int iy = y0; iy < y1; ++iy) {
        if (use_max) {
            for (int ix = x0; ix < x1; ++ix) {
                const float v = src[iy * W + ix];
                if (v > acc || isnan(v)) acc = v;
            }
        } else {
            for (int ix = x0; ix < x1; ++ix) acc += src[iy * W + ix];
        }
    }
    y[y_off + idx] = use_max ? acc : acc / (float)((y1 - y0) * (x1 - x0));
}

// The mean over each plane (global average pooling): one work-group per plane, a tree
// reduction in local memory. LOCAL is the work-group size (a power of two).
#ifndef LOCAL
#define LOCAL 64
#endif

#include "groups.cl"

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void global_avg_pool(__global const float* restrict x, const int x_off,
                     __global float* restrict y, const int y_off, const int size) {
    __local float part[LOCAL];
    const int plane = get_group_id(0), lid = get_local_id(0);
    __global const float* src = x + x_off + plane * size;
    float sum = 0.0f;
    for (int i = lid; i < size; i += LOCAL) sum += src[i];
    sum = group_sum(part, sum, lid);
    if (lid == 0) y[y_off + plane] = sum / (float)size;
}
