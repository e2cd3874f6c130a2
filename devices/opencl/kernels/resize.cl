// Separable resize of (planes, H, W) to (planes, Ho, Wo): each output row oy reads input
// rows iy[oy*ty + a] with weights wy[oy*ty + a], each output column likewise through
// (ix, wx, tx). The taps and weights come from layers.resize.axis_taps, so nearest,
// nearest-exact, (bi)linear and bicubic follow PyTorch's index arithmetic exactly; like
// the CPU layer, columns are combined first, then rows.

__kernel void resize2d(__global const float* restrict x, const int x_off,
                       __global float* restrict y, const int y_off, const int total,
                       const int H, const int W, const int Ho, const int Wo,
                       __global const int* restrict iy, __global const float* restrict wy, const int ty,
                       __global const int* restrict ix, __global const float* restrict wx, const int tx) {
    const int idx = get_global_id(0);
    if (idx >= total) return;
    const int ox = idx % Wo;
    const int t = idx / Wo;
    const int oy = t % Ho;
    const int plane = t / Ho;
    __global const float* src = x + x_off + plane * H * W;
    float acc = 0.0f;
    for (int a = 0; a < ty; ++a) {
        __global const float* row = src + iy[oy * ty + a] * W;
        float r = 0.0f;
        for (int b = 0; b < tx; ++b) {
            const float term = row[ix[ox * tx + b]] * wx[ox * tx + b];
            r = b == 0 ? term : r + term;
        }
        const float term = r * wy[oy * ty + a];
        acc = a == 0 ? term : acc + term;
    }
    y[y_off + idx] = acc;
}
