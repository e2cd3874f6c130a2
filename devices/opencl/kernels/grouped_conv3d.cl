// Grouped 3-D convolution (groups > 1: depthwise and channel-separated video networks,
// MViT's pooling): one work-item per output element sums its group's Cg input channels
// through the kd x kh x kw taps, so every group of every sample goes in one launch.
// Compile-time option: PAD_MODE (0 zeros, 1 reflect, 2 replicate, 3 circular; conv_common.cl).

#include "conv_common.cl"

// The offsets and sizes travel as one argument (see ConvDims in gemm.cl), in this order.
typedef struct {
    int x_off, w_off, bias_off, has_bias, y_off, total, Cin, Cg, Cout, per_group, D, H, W, Do, Ho, Wo;
    int kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
} GroupedConv3dDims;

inline int padded(int i, const int n) {
#if PAD_MODE == 0
    return (i < 0 || i >= n) ? -1 : i;
#else
    return pad_index(i, n);
#endif
}

__kernel void grouped_conv3d(__global const float* restrict x, __global const float* restrict w,
                             __global const float* restrict bias, __global float* restrict y,
                             const GroupedConv3dDims d) {
    const int idx = get_global_id(0);
    if (idx >= d.total) return;
    const int ox = idx % d.Wo;
    int t = idx / d.Wo;
    const int oy = t % d.Ho;
    t /= d.Ho;
    const int oz = t % d.Do;
    t /= d.Do;
    const int oc = t % d.Cout, n = t / d.Cout;
    const int first = oc / d.per_group * d.Cg;  // the group's first input channel
    __global const float* taps = w + d.w_off + oc * d.Cg * d.kd * d.kh * d.kw;
    float acc = 0.0f;
    for (int ci = 0; ci < d.Cg; ++ci) {
        __global const float* volume = x + d.x_off + (n * d.Cin + first + ci) * d.D * d.H * d.W;
        for (int i = 0; i < d.kd; ++i) {
            const int iz = padded(oz * d.sd - d.pd + i * d.dd, d.D);
            if (iz < 0) continue;
            for (int j = 0; j < d.kh; ++j) {
                const int iy = padded(oy * d.sh - d.ph + j * d.dh, d.H);
                if (iy < 0) continue;
                for (int l = 0; l < d.kw; ++l) {
                    const int ix = padded(ox * d.sw - d.pw + l * d.dw, d.W);
                    if (ix < 0) continue;
                    acc = mad(volume[(iz * d.H + iy) * d.W + ix], taps[((ci * d.kd + i) * d.kh + j) * d.kw + l], acc);
                }
            }
        }
    }
    y[d.y_off + idx] = acc + (d.has_bias ? bias[d.bias_off + oc] : 0.0f);
}
