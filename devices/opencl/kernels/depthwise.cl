// Depthwise convolution (groups == input channels): output channel oc reads input channel
// oc / mult through its own kh x kw taps. One work-item per output element.
// Compile-time options: PAD_MODE (0 zeros, 1 reflect, 2 replicate, 3 circular) and ACT,
// the activation fused into the store after the bias (see conv_activation.cl); STORE_ARGS
// and STORE_VALUE(v, i), the elementwise operators chained after it (see conv_common.cl).

#include "conv_common.cl"
#include "conv_activation.cl"

// The offsets and sizes travel as one argument (see ConvDims in gemm.cl), in this order.
typedef struct {
    int x_off, w_off, bias_off, has_bias, y_off, total, C, mult, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
} DepthwiseDims;

__kernel void depthwise_conv(
    __global const float* restrict x, __global const float* restrict w,
    __global const float* restrict bias, __global float* restrict y, const DepthwiseDims d STORE_ARGS)
{
    const int x_off = d.x_off, w_off = d.w_off, bias_off = d.bias_off, has_bias = d.has_bias, y_off = d.y_off;
    const int total = d.total, C = d.C, mult = d.mult, H = d.H, W = d.W, Ho = d.Ho, Wo = d.Wo;
    const int kh = d.kh, kw = d.kw, sh = d.sh, sw = d.sw, ph = d.ph, pw = d.pw, dh = d.dh, dw = d.dw;
    const int idx = get_global_id(0);
    if (idx >= total) return;
    const int ox = idx % Wo;
    int t = idx / Wo;
    const int oy = t % Ho;
    t /= Ho;
    const int cout = C * mult;
    const int oc = t % cout;
    const int b = t / cout;
    const int c = oc / mult;
    __global const float* plane = x + x_off + (b * C + c) * H * W;
    __global const float* taps = w + w_off + oc * kh * kw;
    float acc = 0.0f;
    for (int i = 0; i < kh; ++i) {
        int iy = oy * sh - ph + i * dh;
#if PAD_MODE == 0
        if (iy < 0 || iy >= H) continue;
#else
        iy = pad_index(iy, H);
#endif
        for (int j = 0; j < kw; ++j) {
            int ix = ox * sw - pw + j * dw;
#if PAD_MODE == 0
            if (ix < 0 || ix >= W) continue;
#else
            ix = pad_index(ix, W);
#endif
            acc = mad(plane[iy * W + ix], taps[i * kw + j], acc);
        }
    }
    y[y_off + idx] = conv_activation(STORE_VALUE(acc + (has_bias ? bias[bias_off + oc] : 0.0f), idx));
}
