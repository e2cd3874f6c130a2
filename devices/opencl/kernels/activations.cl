// The activations of layers/activation.py that are simple maps, as functions of the value
// and two float parameters p0, p1 whose meaning depends on the activation (slope, alpha,
// bounds, ...): the map kernels of elementwise.cl apply them, and so does the store of a
// producer with elementwise operators chained after it (devices/opencl/ops/chain.py).
// NaN passes through as it does in PyTorch where the CPU layer keeps it.

inline float softplus1(float s) { return fmax(s, 0.0f) + log1p(exp(-fabs(s))); }

inline float f_relu(float v, float p0, float p1) { return v < 0.0f ? 0.0f : v; }
// max then min, as torch.clamp: a lower bound above the upper gives the upper
inline float f_clamp(float v, float p0, float p1) {
    const float low = v < p0 ? p0 : v;
    return low > p1 ? p1 : low;
}
inline float f_threshold(float v, float p0, float p1) { return v <= p0 ? p1 : v; }
inline float f_leaky_relu(float v, float p0, float p1) { return v > 0.0f ? v : v * p0; }
inline float f_elu(float v, float p0, float p1) { return v > 0.0f ? v : p0 * expm1(v); }
inline float f_celu(float v, float p0, float p1) { return v > 0.0f ? v : p0 * expm1(v / p0); }
inline float f_selu(float v, float p0, float p1) {
    return 1.0507009873554804934193349852946f * (v > 0.0f ? v : 1.6732632423543772848170429916717f * expm1(v));
}
inline float f_gelu(float v, float p0, float p1) {
    return 0.5f * v * (1.0f + erf(v * 0.70710678118654752440f));
}
inline float f_gelu_tanh(float v, float p0, float p1) {
    const float inner = 0.79788456080286535588f * v * (1.0f + 0.044715f * v * v);
    return 0.5f * v * (1.0f + tanh(inner));
}
inline float f_sigmoid(float v, float p0, float p1) { return 1.0f / (1.0f + exp(-v)); }
inline float f_silu(float v, float p0, float p1) { return v / (1.0f + exp(-v)); }
inline float f_tanh(float v, float p0, float p1) { return tanh(v); }
inline float f_mish(float v, float p0, float p1) {
    const float e = exp(fmin(v, 20.0f));
    const float n = e * (e + 2.0f);
    return v * (n / (n + 2.0f));
}
// p0 = beta, p1 = threshold
inline float f_softplus(float v, float p0, float p1) {
    const float s = v * p0;
    return s > p1 ? v : softplus1(s) / p0;
}
inline float f_logsigmoid(float v, float p0, float p1) { return -softplus1(-v); }
inline float f_hardswish(float v, float p0, float p1) {
    return v * clamp(v + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f);
}
inline float f_hardsigmoid(float v, float p0, float p1) {
    return clamp(v * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);
}
inline float f_softsign(float v, float p0, float p1) { return v / (1.0f + fabs(v)); }
inline float f_tanhshrink(float v, float p0, float p1) { return v - tanh(v); }
inline float f_hardshrink(float v, float p0, float p1) { return fabs(v) <= p0 ? 0.0f : v; }
inline float f_softshrink(float v, float p0, float p1) {
    return isnan(v) ? v : (v > p0 ? v - p0 : (v < -p0 ? v + p0 : 0.0f));
}
