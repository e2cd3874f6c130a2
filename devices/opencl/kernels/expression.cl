// Helpers for the kernels generated from pnnx.Expression trees (devices/opencl/ops/
// expression.py appends one kernel to this file per expression and broadcast pattern).
// Each follows what the CPU layer (numpy, PyTorch's semantics) computes in float32.

inline float ge_sign(float a) { return isnan(a) ? 0.0f : (float)(a > 0.0f) - (float)(a < 0.0f); }
inline float ge_maximum(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmax(a, b); }
inline float ge_minimum(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmin(a, b); }
// Python's sign rule (torch.remainder): the result takes the divisor's sign.
inline float ge_remainder(float a, float b) {
    float r = fmod(a, b);
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
    return r;
}
// numpy's floor_divide for floats (npy_divmod): exact where a / b is not.
inline float ge_floor_divide(float a, float b) {
    if (b == 0.0f) return a / b;
    const float mod = fmod(a, b);
    float div = (a - mod) / b;
    if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
    if (div == 0.0f) return copysign(0.0f, a / b);
    const float f = floor(div);
    return (div - f > 0.5f) ? f + 1.0f : f;
}
inline float ge_logaddexp(float a, float b) {
    if (a == b) return a + 0.69314718055994530942f;  // also +-inf
    const float m = fmax(a, b);
    return m + log1p(exp(-fabs(a - b)));
}
inline float ge_square(float a) { return a * a; }
inline float ge_reciprocal(float a) { return 1.0f / a; }
// pow to a number: 0.5 and -0.5 are sqrt and rsqrt, as in PyTorch (C's pow(-inf, 0.5) is inf)
inline float ge_pow_number(float a, float b) { return b == 0.5f ? sqrt(a) : (b == -0.5f ? rsqrt(a) : pow(a, b)); }
