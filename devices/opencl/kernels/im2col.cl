// im2col over up to three spatial dims: every kernel window of x (N, C, D, H, W) as one
// column of cols (N, C * kd * kh * kw, Do * Ho * Wo), rows channel first, then the kernel's
// depth, row and column (PyTorch's order: nn.Unfold's output, a 3-D convolution's GEMM
// operand). Positions the padding covers read zero, or for a convolution's other padding
// modes (1 reflect, 2 replicate, 3 circular) the input element they mirror, repeat or wrap.

typedef struct {
    int x_off, cols_off, total, C, D, H, W, kd, kh, kw, Do, Ho, Wo;
    int sd, sh, sw, dd, dh, dw, pd, ph, pw, mode;
} Im2colDims;

// The input index a padded coordinate reads, or -1 for a zero.
inline int source(int at, const int size, const int mode) {
    if (at >= 0 && at < size) return at;
    if (mode == 0) return -1;
    if (mode == 1) return at < 0 ? -at : 2 * (size - 1) - at;
    if (mode == 2) return clamp(at, 0, size - 1);
    return at < 0 ? at + size : at - size;
}

__kernel void im2col(__global const float* restrict x, __global float* restrict cols, const Im2colDims d) {
    const int id = get_global_id(0);
    if (id >= d.total) return;
    const int spots = d.Do * d.Ho * d.Wo, taps = d.kd * d.kh * d.kw;
    const int o = id % spots, row = (id / spots) % (d.C * taps), n = id / (spots * d.C * taps);
    const int c = row / taps, tap = row % taps;
    const int i = tap / (d.kh * d.kw), j = (tap / d.kw) % d.kh, l = tap % d.kw;
    const int oz = o / (d.Ho * d.Wo), oy = (o / d.Wo) % d.Ho, ox = o % d.Wo;
    const int z = source(oz * d.sd - d.pd + i * d.dd, d.D, d.mode);
    const int y = source(oy * d.sh - d.ph + j * d.dh, d.H, d.mode);
    const int xx = source(ox * d.sw - d.pw + l * d.dw, d.W, d.mode);
    float v = 0.0f;
    if (z >= 0 && y >= 0 && xx >= 0) v = x[d.x_off + (((n * d.C + c) * d.D + z) * d.H + y) * d.W + xx];
    cols[d.cols_off + id] = v;
}

// col2im, nn.Fold's sum: each element of y (N, C, H, W) adds up, tap by tap in the kernel's
// order (as the CPU layer adds), the column entries of every window that covers it, then
// its channel's bias where there is one (a transposed convolution's).
typedef struct {
    int cols_off, y_off, total, C, H, W, kh, kw, rows, cols, sh, sw, dh, dw, ph, pw, bias_off, has_bias;
} Col2imDims;

__kernel void col2im(__global const float* restrict cols, __global float* restrict y,
                     __global const float* restrict bias, const Col2imDims d) {
    const int id = get_global_id(0);
    if (id >= d.total) return;
    const int x = id % d.W, row = (id / d.W) % d.H, c = (id / (d.W * d.H)) % d.C, n = id / (d.W * d.H * d.C);
    const int spots = d.rows * d.cols;
    float sum = 0.0f;
    for (int i = 0; i < d.kh; ++i) {
        const int yy = row + d.ph - i * d.dh;
        if (yy < 0 || yy % d.sh) continue;
        const int r = yy / d.sh;
        if (r >= d.rows) continue;
        for (int j = 0; j < d.kw; ++j) {
            const int xx = x + d.pw - j * d.dw;
            if (xx < 0 || xx % d.sw) continue;
            const int s = xx / d.sw;
            if (s >= d.cols) continue;
            sum += cols[d.cols_off + ((n * d.C + c) * d.kh * d.kw + i * d.kw + j) * spots + r * d.cols + s];
        }
    }
    y[d.y_off + id] = sum + (d.has_bias ? bias[d.bias_off + c] : 0.0f);
}
