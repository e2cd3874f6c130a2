// The activation a convolution applies as it stores each output, after the bias: the
// ACT define, 0 none, 1 relu, 2 relu6, 3 hardswish, 4 hardsigmoid, 5 sigmoid, 6 silu (the
// same expressions as elementwise.cl). Included by gemm.cl and depthwise.cl.

#ifndef ACT
#define ACT 0
#endif

inline float conv_activation(const float v) {
#if ACT == 1
    return v < 0.0f ? 0.0f : v;
#elif ACT == 2
    return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
#elif ACT == 3
    return v * clamp(v + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f);
#elif ACT == 4
    return clamp(v * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);
#elif ACT == 5
    return 1.0f / (1.0f + exp(-v));
#elif ACT == 6
    return v / (1.0f + exp(-v));
#else
    return v;
#endif
}
