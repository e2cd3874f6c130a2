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

// One work-group per image, in three phases, each writing out[o] for o < O from a sum over
// k < K that the group's `lanes` work-items split: the channel means (unless `pooled`: the
// pool wrote them), the hidden vector REDUCE_ACT(b1 + W1 means), the gate EXPAND_ACT(b2 +
// W2 hidden). One loop runs the three, so the reduction and its barriers are compiled once:
// a CPU device (PoCL) copies the code around each barrier, and three copies made its compile
// of this kernel many times longer. The work-group reads back its own writes to `work` after
// a global barrier.
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void excitation_gate(__global const float* restrict x, const int x_off, __global const float* restrict params,
                     __global float* work, const int work_off, const int C, const int HW, const int Cr,
                     const int pooled) {
    __local float part[LOCAL];
    const int n = get_group_id(0), images = get_num_groups(0), lid = get_local_id(0);
    __global float* means = work + work_off + n * C;
    __global float* hidden = work + work_off + images * C + n * Cr;
    __global float* gate = work + work_off + images * (C + Cr) + n * C;
    __global const float* image = x + x_off + n * C * HW;
    __global const float* w1t = params;
    __global const float* b1 = w1t + C * Cr;
    __global const float* w2t = b1 + Cr;
    __global const float* b2 = w2t + Cr * C;
    for (int phase = pooled ? 1 : 0; phase < 3; ++phase) {
        // terms: image[o * HW + k] (phase 0), else wt[k * O + o] * v[k], W transposed
        const int O = phase == 1 ? Cr : C, K = phase == 0 ? HW : phase == 1 ? C : Cr;
        __global const float* v = phase == 0 ? image : phase == 1 ? means : hidden;
        __global const float* wt = phase == 1 ? w1t : w2t;
        __global float* out = phase == 0 ? means : phase == 1 ? hidden : gate;
        const int lanes = lanes_for(O, K), lane = lid % lanes, at_once = LOCAL / lanes;
        for (int o0 = 0; o0 < O; o0 += at_once) {
            const int o = o0 + lid / lanes;
            float sum = 0.0f;
            if (o < O) {
                if (phase == 0)
                    for (int k = lane; k < K; k += lanes) sum += v[o * K + k];
                else
                    for (int k = lane; k < K; k += lanes) sum = mad(wt[k * O + o], v[k], sum);
            }
            sum = lanes_sum(part, sum, lid, lanes);
            if (o < O && lane == 0)
                out[o] = phase == 0 ? sum / (float)HW
                       : phase == 1 ? REDUCE_ACT(sum + b1[o]) : EXPAND_ACT(sum + b2[o]);
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

// y = x * gate of its (image, channel); x and y contiguous (N, C, H, W), y may be x.
__kernel void excitation_scale(__global const float* x, const int x_off, __global const float* restrict gate,
                               const int gate_off, __global float* y, const int y_off, const int HW,
                               const int total) {
    const int i = get_global_id(0);
    if (i >= total) return;
    y[y_off + i] = x[x_off + i] * gate[gate_off + i / HW];
}
