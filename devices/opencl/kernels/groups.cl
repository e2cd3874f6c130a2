// Sums and maxima across the LOCAL work-items of a work-group (LOCAL a power of two, defined
// by the including file), as trees in `part` (LOCAL floats of local memory); every
// work-item gets the result, and `part` may be used again right after.

inline float group_sum(__local float* part, const float value, const int lid) {
    part[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = LOCAL / 2; step > 0; step >>= 1) {
        if (lid < step) part[lid] += part[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

inline float group_max(__local float* part, const float value, const int lid) {
    part[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = LOCAL / 2; step > 0; step >>= 1) {
        if (lid < step) part[lid] = fmax(part[lid], part[lid + step]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float top = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return top;
}
