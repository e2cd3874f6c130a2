// What the product and convolution sources (gemm.cl, depthwise.cl) share.
// PAD_MODE (convolutions): 0 zeros, 1 reflect, 2 replicate, 3 circular; pad_index maps
// an index outside [0, n) to the one it reads.
// STORE_ARGS, STORE_VALUE(v, i): defined by a chain of elementwise operators fused after the
// producer (ops/chain.py): its extra kernel arguments, and the value stored for output
// element i; by default none, and v.
// LOAD_ARGS, LOAD_VALUE(v, plane) (gemm.cl's convolutions): defined where an excitation
// block's gate is folded into the convolution reading its output (ops/excitation.py): its
// extra kernel arguments, and the value read for input element v of plane (image * Cin +
// channel); by default none, and v.

#ifndef PAD_MODE
#define PAD_MODE 0
#endif
#ifndef STORE_ARGS
#define STORE_ARGS
#endif
#ifndef STORE_VALUE
#define STORE_VALUE(v, i) (v)
#endif
#ifndef LOAD_ARGS
#define LOAD_ARGS
#endif
#ifndef LOAD_VALUE
#define LOAD_VALUE(v, plane) (v)
#endif

inline int pad_index(int i, int n) {
#if PAD_MODE == 1
    if (i < 0) i = -i;
    if (i >= n) i = 2 * n - 2 - i;
#elif PAD_MODE == 2
    i = clamp(i, 0, n - 1);
#elif PAD_MODE == 3
    i = ((i % n) + n) % n;
#endif
    return i;
}
