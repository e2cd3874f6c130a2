// 2-D pooling over (planes, H, W), one work-item per output element (1-D pooling runs
// with H == 1; 3-D pooling has its own kernel below). Windows follow PyTorch: padding
// never wins a max (it is -inf), a NaN does; the average divides by divisor_override, or
// by the window clipped to input + padding (count_include_pad) or to the input alone.

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

// 3-D window pooling over (planes, D, H, W), max or average as the 2-D kernels above; the
// offsets and sizes travel as one argument (see ConvDims in gemm.cl), in this order.
typedef struct {
    int x_off, y_off, total, D, H, W, Do, Ho, Wo, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
    int use_max, include_pad, divisor;
} Pool3dDims;

__kernel void window_pool3d(__global const float* restrict x, __global float* restrict y, const Pool3dDims d) {
    const int idx = get_global_id(0);
    if (idx >= d.total) return;
    const int ox = idx % d.Wo;
    int t = idx / d.Wo;
    const int oy = t % d.Ho;
    t /= d.Ho;
    const int oz = t % d.Do, plane = t / d.Do;
    __global const float* src = x + d.x_off + plane * d.D * d.H * d.W;
    if (d.use_max) {
        float best = -INFINITY;
        for (int i = 0; i < d.kd; ++i) {
            const int iz = oz * d.sd - d.pd + i * d.dd;
            if (iz < 0 || iz >= d.D) continue;
            for (int j = 0; j < d.kh; ++j) {
                const int iy = oy * d.sh - d.ph + j * d.dh;
                if (iy < 0 || iy >= d.H) continue;
                for (int l = 0; l < d.kw; ++l) {
                    const int ix = ox * d.sw - d.pw + l * d.dw;
                    if (ix < 0 || ix >= d.W) continue;
                    const float v = src[(iz * d.H + iy) * d.W + ix];
                    if (v > best || isnan(v)) best = v;
                }
            }
        }
        y[d.y_off + idx] = best;
        return;
    }
    int z0 = oz * d.sd - d.pd, y0 = oy * d.sh - d.ph, x0 = ox * d.sw - d.pw;
    int z1 = min(z0 + d.kd, d.D + d.pd), y1 = min(y0 + d.kh, d.H + d.ph), x1 = min(x0 + d.kw, d.W + d.pw);
    const int padded = (z1 - z0) * (y1 - y0) * (x1 - x0);
    z0 = max(z0, 0); y0 = max(y0, 0); x0 = max(x0, 0);
    z1 = min(z1, d.D); y1 = min(y1, d.H); x1 = min(x1, d.W);
    float sum = 0.0f;
    for (int iz = z0; iz < z1; ++iz)
        for (int iy = y0; iy < y1; ++iy)
            for (int ix = x0; ix < x1; ++ix) sum += src[(iz * d.H + iy) * d.W + ix];
    const int count = d.divisor > 0 ? d.divisor : (d.include_pad ? padded : (z1 - z0) * (y1 - y0) * (x1 - x0));
    y[d.y_off + idx] = sum / (float)count;
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
