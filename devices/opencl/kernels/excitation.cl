// Squeeze-and-excitation blocks (devices/opencl/ops/excitation.py) in two launches: the gate
// of every image, then the input times its channel's gate.
//
// Compile-time options (-D, and the source the op puts before this file):
//   LOCAL                      the gate's work-group size (a power of two)
//   REDUCE_ACT(v), EXPAND_ACT(v)  the activations after the first and the second product
//
// `params` holds, one after another: W1 transposed (C, Cr), b1 (Cr), W2 transposed (Cr, C),
// b2 (C). `work` holds the channel means (N, C), the hidden vectors (N, Cr) and the gates
// (N, C), one after another.

#ifndef LOCAL
#define LOCAL 64
#endif

// The sum of `value` over the `lanes` consecutive work-items of one slot (lanes a power of
// two dividing LOCAL), for every work-item of the slot; `part` may be used again after.
inline float lanes_sum(__local float* part, const float value, const int lid, const int lanes) {
    part[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = lanes / 2; step > 0; step >>= 1) {
        if (lid % lanes < step) part[lid] += part[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = part[lid - lid % lanes];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

// How many work-items share each of `outputs` sums of `terms` terms: the most (a power of
// two) that still lets every output have its own.
inline int lanes_for(const int outputs, const int terms) {
    int lanes = 1;
    while (lanes * 2 * outputs <= LOCAL && lanes * 2 <= terms) lanes *= 2;
    return lanes;
}

// out[o] = b[o] + sum_k wt[k * O + o] * v[k] for o < O, before the activation `expand`
// chooses (0: REDUCE_ACT, 1: EXPAND_ACT); the work-group's `lanes` split each sum.
inline void vector_product(__local float* part, __global const float* restrict wt,
                           __global const float* restrict b, __global const float* v,
                           __global float* out, const int O, const int K, const int expand, const int lid) {
    const int lanes = lanes_for(O, K), lane = lid % lanes, at_once = LOCAL / lanes;
    for (int o0 = 0; o0 < O; o0 += at_once) {
        const int o = o0 + lid / lanes;
        float sum = 0.0f;
        if (o < O)
            for (int k = lane; k < K; k += lanes) sum = mad(wt[k * O + o], v[k], sum);
        sum = lanes_sum(part, sum, lid, lanes);
        if (o < O && lane == 0) out[o] = expand ? EXPAND_ACT(sum + b[o]) : REDUCE_ACT(sum + b[o]);
    }
}

// One work-group per image: its channel means (unless `pooled`: the pool wrote them), then
// the hidden vector and the gate. The work-group's own writes to `work` are read back by
// it after a global barrier.
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void excitation_gate(__global const float* restrict x, const int x_off, __global const float* restrict params,
                     __global float* work, const int work_off, const int C, const int HW, const int Cr,
                     const int pooled) {
    __local float part[LOCAL];
    const int n = get_group_id(0), images = get_num_groups(0), lid = get_local_id(0);
    __global float* means = work + work_off + n * C;
    __global float* hidden = work + work_off + images * C + n * Cr;
    __global float* gate = work + work_off + images * (C + Cr) + n * C;
    if (!pooled) {
        __global const float* image = x + x_off + n * C * HW;
        const int lanes = lanes_for(C, HW), lane = lid % lanes, at_once = LOCAL / lanes;
        for (int c0 = 0; c0 < C; c0 += at_once) {
            const int c = c0 + lid / lanes;
            float sum = 0.0f;
            if (c < C)
                for (int i = lane; i < HW; i += lanes) sum += image[c * HW + i];
            sum = lanes_sum(part, sum, lid, lanes);
            if (c < C && lane == 0) means[c] = sum / (float)HW;
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    __global const float* w1t = params;
    __global const float* b1 = w1t + C * Cr;
    __global const float* w2t = b1 + Cr;
    __global const float* b2 = w2t + Cr * C;
    vector_product(part, w1t, b1, means, hidden, Cr, C, 0, lid);
    barrier(CLK_GLOBAL_MEM_FENCE);
    vector_product(part, w2t, b2, hidden, gate, C, Cr, 1, lid);
}

// y = x * gate of its (image, channel); x and y contiguous (N, C, H, W), y may be x.
__kernel void excitation_scale(__global const float* x, const int x_off, __global const float* restrict gate,
                               const int gate_off, __global float* y, const int y_off, const int HW,
                               const int total) {
    const int i = get_global_id(0);
    if (i >= total) return;
    y[y_off + i] = x[x_off + i] * gate[gate_off + i / HW];
}
