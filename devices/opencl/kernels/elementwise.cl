// Elementwise maps: the activations of layers/activation.py that are simple maps
// (activations.cl), the per-channel affine map of an inference batch norm (its
// statistics folded into scale and shift), and the gated halves of F.glu. Every map
// kernel has the same arguments: x (offset), y (offset), n, and two float parameters p0,
// p1 whose meaning depends on the activation (slope, alpha, bounds, ...).

#include "activations.cl"

#define MAP_KERNEL(name)                                                               \
__kernel void map_##name(__global const float* restrict x, const int x_off,            \
                         __global float* restrict y, const int y_off, const int n,     \
                         const float p0, const float p1) {                             \
    const int i = get_global_id(0);                                                    \
    if (i < n) y[y_off + i] = f_##name(x[x_off + i], p0, p1);                          \
}

MAP_KERNEL(relu)
MAP_KERNEL(clamp)
MAP_KERNEL(threshold)
MAP_KERNEL(leaky_relu)
MAP_KERNEL(elu)
MAP_KERNEL(celu)
MAP_KERNEL(selu)
MAP_KERNEL(gelu)
MAP_KERNEL(gelu_tanh)
MAP_KERNEL(sigmoid)
MAP_KERNEL(silu)
MAP_KERNEL(tanh)
MAP_KERNEL(mish)
MAP_KERNEL(softplus)
MAP_KERNEL(logsigmoid)
MAP_KERNEL(hardswish)
MAP_KERNEL(hardsigmoid)
MAP_KERNEL(softsign)
MAP_KERNEL(tanhshrink)
MAP_KERNEL(hardshrink)
MAP_KERNEL(softshrink)

// y = x * scale[c] + shift[c] for x viewed as (outer, C, inner).
__kernel void channel_affine(__global const float* restrict x, const int x_off,
                             __global float* restrict y, const int y_off,
                             __global const float* restrict scale,
                             __global const float* restrict shift,
                             const int n, const int C, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % C;
    y[y_off + i] = x[x_off + i] * scale[c] + shift[c];
}

// F.glu: x viewed as (outer, 2 * width, inner), y (outer, width, inner) = first half * sigmoid(second).
__kernel void glu(__global const float* restrict x, const int x_off,
                  __global float* restrict y, const int y_off,
                  const int n, const int width, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int outer = i / (width * inner);
    const int at = x_off + i + outer * width * inner;  // the same place in the first half
    y[y_off + i] = x[at] * f_sigmoid(x[at + width * inner], 0.0f, 0.0f);
}
