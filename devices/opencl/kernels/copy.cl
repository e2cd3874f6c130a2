// Strided copy of up to 6 dims: dst[d] = src[s] for every index of `dims`, both sides with
// element strides (a slice of a concat output, a channel shuffle, a non-contiguous chunk).
// Compile-time option: ELEM, the element type (uchar, ushort, uint, ulong: copies are
// bit-exact, whatever the dtype).

#ifndef ELEM
#define ELEM uint
#endif

__kernel void copy_strided(__global const ELEM* restrict src, const int src_off,
                           __global ELEM* restrict dst, const int dst_off, const int n,
                           const int d0, const int d1, const int d2, const int d3, const int d4, const int d5,
                           const int s0, const int s1, const int s2, const int s3, const int s4, const int s5,
                           const int t0, const int t1, const int t2, const int t3, const int t4, const int t5) {
    int i = get_global_id(0);
    if (i >= n) return;
    const int i5 = i % d5; i /= d5;
    const int i4 = i % d4; i /= d4;
    const int i3 = i % d3; i /= d3;
    const int i2 = i % d2; i /= d2;
    const int i1 = i % d1; i /= d1;
    const int i0 = i;
    dst[dst_off + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3 + i4 * t4 + i5 * t5] =
        src[src_off + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5];
}
