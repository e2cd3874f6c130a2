// F.grid_sample over images: x (N, C, H, W) read at grid (N, Ho, Wo, 2) of normalised
// (x, y) into y (N, C, Ho, Wo). One work-item an output pixel: it places the point once
// and reads every channel there. Built with MODE (0 bilinear, 1 nearest, 2 bicubic),
// PADDING (0 zeros, 1 border, 2 reflection) and ALIGN (align_corners); the arithmetic
// follows the CPU layer (layers/sampling.py) step for step.

// A normalised coordinate -> a pixel position along an axis of `size` pixels.
inline float unnormalize(const float c, const int size) {
#if ALIGN
    return (c + 1.0f) * 0.5f * (float)(size - 1);
#else
    return ((c + 1.0f) * (float)size - 1.0f) * 0.5f;
#endif
}

// A position folded back into the axis, as padding_mode='reflection' does.
inline float reflect(const float p, const int size) {
#if ALIGN
    const float low = 0.0f, span = (float)(size - 1);
#else
    const float low = -0.5f, span = (float)size;
#endif
    if (span <= 0.0f) return 0.0f;
    const float distance = fabs(p - low);
    const float flips = floor(distance / span);
    const float extra = distance - flips * span;
    const float folded = fmod(flips, 2.0f) == 0.0f ? low + extra : low + span - extra;
    return clamp(folded, 0.0f, (float)(size - 1));  // within already where finite; NaN goes to 0
}

// A position after the padding mode (zeros: as it is; reads outside give 0).
inline float fold(const float p, const int size) {
#if PADDING == 1
    return clamp(p, 0.0f, (float)(size - 1));
#elif PADDING == 2
    return reflect(p, size);
#else
    return p;
#endif
}

// Pixel (row, col) of one channel plane, 0 outside; NaN positions are outside too.
inline float pixel(__global const float* plane, const float row, const float col, const int H, const int W) {
    if (!(row >= 0.0f && row < (float)H && col >= 0.0f && col < (float)W)) return 0.0f;
    return plane[(int)row * W + (int)col];
}

// Keys' cubic-convolution weights (A = -0.75) for the fractional offset t.
inline float4 cubic(const float t) {
    const float a = -0.75f;
    const float u = t + 1.0f, v = 1.0f - t, w = 2.0f - t;
    return (float4)(((a * u - 5.0f * a) * u + 8.0f * a) * u - 4.0f * a,
                    ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f,
                    ((a + 2.0f) * v - (a + 3.0f)) * v * v + 1.0f,
                    ((a * w - 5.0f * a) * w + 8.0f * a) * w - 4.0f * a);
}

__kernel void grid_sample2d(__global const float* restrict x, const int x_off,
                            __global const float* restrict grid, const int grid_off,
                            __global float* restrict y, const int y_off,
                            const int N, const int C, const int H, const int W, const int Ho, const int Wo) {
    const int idx = get_global_id(0);
    if (idx >= N * Ho * Wo) return;
    const int n = idx / (Ho * Wo);
    const int at = idx - n * Ho * Wo;  // oy * Wo + ox
    const float gx = grid[grid_off + 2 * idx];
    const float gy = grid[grid_off + 2 * idx + 1];
    __global const float* image = x + x_off + (size_t)n * C * H * W;
    __global float* out = y + y_off + (size_t)n * C * Ho * Wo + at;
#if MODE == 2
    const float px = unnormalize(gx, W), py = unnormalize(gy, H);
    const float x0 = floor(px), y0 = floor(py);
    const float4 wx = cubic(px - x0), wy = cubic(py - y0);
    const float wxs[4] = {wx.x, wx.y, wx.z, wx.w};
    const float wys[4] = {wy.x, wy.y, wy.z, wy.w};
    float rows[4], cols[4];
    for (int k = 0; k < 4; ++k) {
        rows[k] = fold(y0 + (float)(k - 1), H);
        cols[k] = fold(x0 + (float)(k - 1), W);
    }
    for (int c = 0; c < C; ++c) {
        __global const float* plane = image + (size_t)c * H * W;
        float acc = 0.0f;
        for (int i = 0; i < 4; ++i) {
            float row = 0.0f;
            for (int j = 0; j < 4; ++j) row += pixel(plane, rows[i], cols[j], H, W) * wxs[j];
            acc += row * wys[i];
        }
        out[(size_t)c * Ho * Wo] = acc;
    }
#else
    const float px = fold(unnormalize(gx, W), W), py = fold(unnormalize(gy, H), H);
#if MODE == 1
    const float row = rint(py), col = rint(px);
    for (int c = 0; c < C; ++c)
        out[(size_t)c * Ho * Wo] = pixel(image + (size_t)c * H * W, row, col, H, W);
#else
    const float x0 = floor(px), y0 = floor(py);
    const float fx = px - x0, fy = py - y0;
    const float w00 = (1.0f - fy) * (1.0f - fx), w01 = (1.0f - fy) * fx, w10 = fy * (1.0f - fx), w11 = fy * fx;
    for (int c = 0; c < C; ++c) {
        __global const float* plane = image + (size_t)c * H * W;
        float acc = pixel(plane, y0, x0, H, W) * w00;
        acc += pixel(plane, y0, x0 + 1.0f, H, W) * w01;
        acc += pixel(plane, y0 + 1.0f, x0, H, W) * w10;
        acc += pixel(plane, y0 + 1.0f, x0 + 1.0f, H, W) * w11;
        out[(size_t)c * Ho * Wo] = acc;
    }
#endif
#endif
}

// The normalised coordinate of pixel centre i of `size` along an axis (align: the corner
// pixels' centres at -1 and 1; else their outer edges).
inline float base_coordinate(const int i, const int size, const int align) {
    if (align) return size > 1 ? -1.0f + 2.0f * (float)i / (float)(size - 1) : 0.0f;
    return (float)(2 * i + 1) / (float)size - 1.0f;
}

// F.affine_grid: theta (N, S, S + 1) -> grid (N, [D,] H, W, S) of theta @ (x, y[, z], 1),
// S = 2 (D = 1) or 3. One work-item a point.
__kernel void affine_grid(__global const float* restrict theta, const int theta_off,
                          __global float* restrict y, const int y_off,
                          const int N, const int S, const int D, const int H, const int W, const int align) {
    const int idx = get_global_id(0);
    if (idx >= N * D * H * W) return;
    const int i = idx % W;
    const int j = (idx / W) % H;
    const int k = (idx / (W * H)) % D;
    const int n = idx / (W * H * D);
    const float p[3] = {base_coordinate(i, W, align), base_coordinate(j, H, align), base_coordinate(k, D, align)};
    __global const float* t = theta + theta_off + n * S * (S + 1);
    for (int r = 0; r < S; ++r) {
        float acc = 0.0f;
        for (int q = 0; q < S; ++q) acc += t[r * (S + 1) + q] * p[q];
        y[y_off + idx * S + r] = acc + t[r * (S + 1) + S];
    }
}
