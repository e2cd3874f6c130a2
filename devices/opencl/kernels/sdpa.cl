// F.scaled_dot_product_attention's weights in place: each row of scores s (S keys a row)
// becomes softmax(s * scale + mask). Row r is score (i0, i1, i2, l) of batch dims
// (d0, d1, d2) and L queries; its mask row starts at m_off + i0 * ms0 + i1 * ms1 + i2 * ms2
// + l * msl, key j at j * msj further (strides 0 where the mask broadcasts). kind: 0 no
// mask (its buffers are then any, never read), 1 float (added), 2 boolean (one byte an
// element, zero: the key takes no part). causal: query l sees keys 0..l. A query that
// sees no key gets zero weights (PyTorch's safe softmax), as the CPU layer gives.

#ifndef LOCAL
#define LOCAL 64
#endif

#include "groups.cl"

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void sdpa_softmax(__global float* s, const int s_off, const int S, const int L, const int d1, const int d2,
                  const float scale, __global const float* mask_f, __global const uchar* mask_b, const int m_off,
                  const int kind, const int ms0, const int ms1, const int ms2, const int msl, const int msj,
                  const int causal) {
    __local float part[LOCAL];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global float* x = s + s_off + row * S;
    const int l = row % L, batch = row / L;
    const int i2 = batch % d2, i1 = (batch / d2) % d1, i0 = batch / (d2 * d1);
    const int at = m_off + i0 * ms0 + i1 * ms1 + i2 * ms2 + l * msl;
    float m = -INFINITY;
    for (int j = lid; j < S; j += LOCAL) {
        float v = x[j] * scale;
        if (kind == 1) v += mask_f[at + j * msj];
        else if (kind == 2 && !mask_b[at + j * msj]) v = -INFINITY;
        if (causal && j > l) v = -INFINITY;
        x[j] = v;
        m = fmax(m, v);
    }
    m = group_max(part, m, lid);
    if (m == -INFINITY) {  // the same for the whole group: no barrier is skipped by some
        for (int j = lid; j < S; j += LOCAL) x[j] = 0.0f;
        return;
    }
    float total = 0.0f;
    for (int j = lid; j < S; j += LOCAL) total += exp(x[j] - m);
    const float inv = 1.0f / group_sum(part, total, lid);
    for (int j = lid; j < S; j += LOCAL) x[j] = exp(x[j] - m) * inv;
}
