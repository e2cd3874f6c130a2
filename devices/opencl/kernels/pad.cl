// Padding (F.pad and the nn.*Pad modules), negative pads cropping: output element id reads
// the input element its coordinates map to, or the constant value. g holds six ints a dim,
// outermost first: output size, input stride, before, input size, and for circular
// padding the first kept input index and the kept size. mode: 0 constant, 1 reflect,
// 2 replicate (both as if the whole input were padded, then cropped, as PyTorch does),
// 3 circular (the cropped input wrapped around).

__kernel void pad_nd(__global const float* restrict x, const int x_off, __global float* restrict y,
                     const int y_off, const int total, const int rank, __global const int* restrict g,
                     const int mode, const float value) {
    const int id = get_global_id(0);
    if (id >= total) return;
    int rest = id, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
        __global const int* a = g + 6 * d;
        const int o = rest % a[0];
        rest /= a[0];
        const int size = a[3];
        int s;
        if (mode == 3) {
            int c = o - max(a[2], 0);
            c = c < 0 ? c + a[5] : (c >= a[5] ? c - a[5] : c);
            s = c + a[4];
        } else {
            s = o - a[2];
            if (s < 0 || s >= size) {
                if (mode == 0) {
                    y[y_off + id] = value;
                    return;
                }
                s = mode == 1 ? (s < 0 ? -s : 2 * (size - 1) - s) : clamp(s, 0, size - 1);
            }
        }
        src += s * a[1];
    }
    y[y_off + id] = x[x_off + src];
}
