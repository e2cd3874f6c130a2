"""layers/pooling.py beyond the goldens: bad params, bad shapes, and hypothesis properties
against naive references that walk every output position and kernel tap the way PyTorch's
CPU loops do (windows clipped to the input, first max wins, divisor rules spelled out)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.pooling import adaptive_bins, pooled_size
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator


def make(op_type, params, outputs=1):
    op = Operator(
        op_type, "op",
        inputs=[Operand("in0")],
        outputs=[Operand(f"out{i}") for i in range(outputs)],
        params=params,
        input_names=[""],
    )
    return lookup(op_type)(op)


def window_params(k, s, p, d, ceil, **extra):
    return dict(kernel_size=list(k), stride=list(s), padding=list(p), dilation=list(d), ceil_mode=ceil,
                **extra)


# --------------------------------------------------------------------------------------
# naive references
# --------------------------------------------------------------------------------------
def naive_count(size, k, s, p, d, ceil):
    """Windows by enumeration: in floor mode every window that fits the padded input; in
    ceil mode windows keep coming while the previous one left data uncovered, but none may
    start in the right padding."""
    span, total = d * (k - 1) + 1, size + 2 * p
    o = 0
    while True:
        if not ceil and o * s + span > total:
            return o
        if ceil and o > 0 and ((o - 1) * s + span >= total or o * s >= size + p):
            return o
        o += 1


def naive_window_pool(x, k, s, p, d, ceil, kind, include_pad=True, divisor=None):
    """Max (values, flat indices) or average over (..., *spatial), one output at a time."""
    nd = len(k)
    sizes = x.shape[-nd:]
    outs = [naive_count(*a, ceil) for a in zip(sizes, k, s, p, d)]
    lead = x.shape[:-nd]
    values = np.zeros(lead + tuple(outs), dtype=np.float64)
    indices = np.zeros(lead + tuple(outs), dtype=np.int64)
    for pos in np.ndindex(*outs):
        starts = [o * ss - pp for o, ss, pp in zip(pos, s, p)]
        if kind == "max":
            best = np.full(lead, -np.inf)
            # PyTorch starts from the window's first tap at or past 0, even when that tap is
            # beyond the input (a window wholly in padding: -inf at an out-of-plane index).
            first = [st_ + ((max(-st_, 0) + dd - 1) // dd) * dd for st_, dd in zip(starts, d)]
            where = np.full(lead, first[-1] + (first[0] * sizes[-1] if nd == 2 else 0))
            for taps in np.ndindex(*k):
                src = [st_ + t * dd for st_, t, dd in zip(starts, taps, d)]
                if not all(0 <= v < n for v, n in zip(src, sizes)):
                    continue
                val = x[(Ellipsis, *src)]
                better = (val > best) | np.isnan(val)
                best = np.where(better, val, best)
                where = np.where(better, np.ravel_multi_index(src, sizes), where)
            values[(Ellipsis, *pos)] = best
            indices[(Ellipsis, *pos)] = where
        else:
            ends = [min(st_ + kk, n + pp) for st_, kk, n, pp in zip(starts, k, sizes, p)]
            pool = math.prod(e - b for b, e in zip(starts, ends))
            lo = [max(b, 0) for b in starts]
            hi = [min(e, n) for e, n in zip(ends, sizes)]
            region = x[(Ellipsis, *[slice(a, b) for a, b in zip(lo, hi)])].astype(np.float64)
            total = region.sum(axis=tuple(range(-nd, 0)))
            count = divisor or (pool if include_pad else math.prod(b - a for a, b in zip(lo, hi)))
            values[(Ellipsis, *pos)] = total / count
    return values, indices


def naive_adaptive(x, outs, kind):
    nd = len(outs)
    sizes = x.shape[-nd:]
    lead = x.shape[:-nd]
    values = np.zeros(lead + tuple(outs))
    indices = np.zeros(lead + tuple(outs), dtype=np.int64)
    for pos in np.ndindex(*outs):
        lo = [math.floor(i * n / o) for i, n, o in zip(pos, sizes, outs)]
        hi = [math.ceil((i + 1) * n / o) for i, n, o in zip(pos, sizes, outs)]
        region = x[(Ellipsis, *[slice(a, b) for a, b in zip(lo, hi)])]
        flat = region.reshape(lead + (-1,))
        if kind == "avg":
            values[(Ellipsis, *pos)] = flat.astype(np.float64).mean(axis=-1)
        else:
            at = flat.argmax(axis=-1)
            values[(Ellipsis, *pos)] = flat.max(axis=-1)
            local = np.unravel_index(at, [b - a for a, b in zip(lo, hi)])
            indices[(Ellipsis, *pos)] = np.ravel_multi_index(tuple(l + a for l, a in zip(local, lo)), sizes)
    return values, indices


# --------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------
@st.composite
def window_cases(draw, nd=None):
    nd = nd or draw(st.sampled_from([1, 2]))
    k = [draw(st.integers(1, 4)) for _ in range(nd)]
    d = [draw(st.integers(1, 2)) for _ in range(nd)]
    s = [draw(st.integers(1, 3)) for _ in range(nd)]
    p = [draw(st.integers(0, (dd * (kk - 1) + 1) // 2)) for kk, dd in zip(k, d)]
    sizes = [draw(st.integers(max(1, dd * (kk - 1) + 1 - 2 * pp), 9)) for kk, dd, pp in zip(k, d, p)]
    ceil = draw(st.booleans())
    lead = draw(st.sampled_from([(2, 3), (3,)]))
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).standard_normal(lead + tuple(sizes)).astype(np.float32)
    if draw(st.booleans()):
        x[..., 0] = -np.inf  # rows no real value beats: the index must be the first real one
    return nd, k, s, p, d, ceil, x


@settings(max_examples=120, deadline=None)
@given(window_cases())
def test_max_pool_values_and_indices_match_the_naive_loop(case):
    nd, k, s, p, d, ceil, x = case
    layer = make(f"F.max_pool{nd}d", window_params(k, s, p, d, ceil, return_indices=True), outputs=2)
    values, indices = layer.forward([x])
    want_values, want_indices = naive_window_pool(x, k, s, p, d, ceil, "max")
    assert values.dtype == np.float32 and indices.dtype == np.int64
    np.testing.assert_array_equal(values, want_values.astype(np.float32))
    np.testing.assert_array_equal(indices, want_indices)
    plain = make(f"nn.MaxPool{nd}d", window_params(k, s, p, d, ceil))
    np.testing.assert_array_equal(plain.forward([x])[0], values)
    assert [spec.shape for spec in layer.infer([TensorSpec(x.shape, x.dtype)])] == [values.shape] * 2


@settings(max_examples=120, deadline=None)
@given(window_cases(), st.booleans(), st.sampled_from([None, 3, 7]))
def test_avg_pool_matches_the_naive_loop(case, include_pad, divisor):
    nd, k, _, _, _, ceil, x = case
    s = [min(v, 3) for v in case[2]]
    p = [min(v, kk // 2) for v, kk in zip(case[3], k)]  # no dilation: half the plain kernel
    if any(n + 2 * pp < kk for n, pp, kk in zip(x.shape[-nd:], p, k)):
        return
    x = np.nan_to_num(x, neginf=-5.0)
    divisor = divisor if nd == 2 else None
    params = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=include_pad,
                  divisor_override=divisor)
    got = make(f"F.avg_pool{nd}d", params).forward([x])[0]
    want, _ = naive_window_pool(x, k, s, p, [1] * nd, ceil, "avg", include_pad, divisor)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def aten_pool(op_type, *arguments):
    """An ``aten::`` pool whose input 0 is data and each further input a constant made by an
    input-less pnnx.Expression, as pnnx writes them (``...``: a size computed at run time)."""
    operands = [Operand(f"in{i}") for i in range(len(arguments) + 1)]
    for operand, value in zip(operands[1:], arguments):
        if value is not ...:
            operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator(op_type, "op", inputs=operands, outputs=[Operand("out0")], input_names=[""] * len(operands))
    return lookup(op_type)(op)


@settings(max_examples=80, deadline=None)
@given(window_cases(), st.booleans(), st.booleans())
def test_aten_pools_match_the_naive_loop_with_sizes_given_or_computed(case, use_max, computed):
    """``aten::max_pool*d`` / ``avg_pool*d``, as pnnx leaves them where a size comes from the
    input's: the same windows as the naive loop, whether the kernel is a constant or an
    input known only at run time (the stride left at None: the kernel's)."""
    nd, k, _, p, d, ceil, x = case
    x = np.nan_to_num(x, neginf=-5.0)
    kernel = ... if computed else k
    if use_max:
        layer = aten_pool(f"aten::max_pool{nd}d", kernel, None, p, d, ceil)
        want, _ = naive_window_pool(x, k, k, p, d, ceil, "max")
    else:
        p = [min(v, kk // 2) for v, kk in zip(p, k)]  # no dilation: half the plain kernel
        if any(n + 2 * pp < kk for n, pp, kk in zip(x.shape[-nd:], p, k)):
            return
        flags = (ceil, False) if nd == 1 else (ceil, False, None)
        layer = aten_pool(f"aten::avg_pool{nd}d", kernel, [], p, *flags)
        want, _ = naive_window_pool(x, k, k, p, [1] * nd, ceil, "avg", False)
    rest = [None] * (len(layer.arguments) - 1)  # the constants' values: the layer read them at build
    got = layer.forward([x, k if computed else None, *rest])[0]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-6)
    sizes = SequenceSpec(tuple(ScalarSpec((), np.dtype(np.int64), v) for v in k))  # known to inference
    unused = TensorSpec((), np.dtype(np.int64))
    assert layer.infer([TensorSpec(x.shape, x.dtype), sizes, *[unused] * len(rest)])[0].shape == got.shape


def test_aten_pools_refuse_flags_computed_in_the_graph():
    with pytest.raises(LayerConfigError, match="ceil_mode .*must be a constant"):
        aten_pool("aten::max_pool2d", [2, 2], None, [0, 0], [1, 1], ...)
    with pytest.raises(LayerConfigError, match="padding"):
        aten_pool("aten::avg_pool2d", [2, 2], None, [3, 3], False, True, None)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20), st.integers(1, 5), st.integers(1, 4), st.integers(0, 3), st.integers(1, 3),
       st.booleans())
def test_pooled_size_counts_the_windows(size, k, s, p, d, ceil):
    if p > (d * (k - 1) + 1) // 2 or size + 2 * p < d * (k - 1) + 1:
        return
    assert pooled_size(size, k, s, p, d, ceil) == naive_count(size, k, s, p, d, ceil)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([1, 2]), st.data())
def test_adaptive_pooling_matches_the_naive_bins(nd, data):
    sizes = [data.draw(st.integers(1, 11)) for _ in range(nd)]
    outs = [data.draw(st.integers(1, 8)) for _ in range(nd)]
    keep = [data.draw(st.booleans()) for _ in range(nd)] if nd == 2 else [False]
    param = [0 if kept else o for o, kept in zip(outs, keep)]
    outs = [n if kept else o for n, o, kept in zip(sizes, outs, keep)]
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = rng.standard_normal((2, 3, *sizes)).astype(np.float32)
    avg = make(f"F.adaptive_avg_pool{nd}d", dict(output_size=param)).forward([x])[0]
    np.testing.assert_allclose(avg, naive_adaptive(x, outs, "avg")[0], rtol=1e-5, atol=1e-6)
    indexed = make(f"F.adaptive_max_pool{nd}d", dict(output_size=param, return_indices=True), 2)
    values, indices = indexed.forward([x])
    want_values, want_indices = naive_adaptive(x, outs, "max")
    np.testing.assert_array_equal(values, want_values.astype(np.float32))
    np.testing.assert_array_equal(indices, want_indices)
    plain = make(f"nn.AdaptiveMaxPool{nd}d", dict(output_size=param, return_indices=False))
    np.testing.assert_array_equal(plain.forward([x])[0], values)
    assert avg.dtype == values.dtype == np.float32


def test_adaptive_bins_are_pytorchs():
    start, end = adaptive_bins(10, 4)
    assert start.tolist() == [0, 2, 5, 7] and end.tolist() == [3, 5, 8, 10]


# --------------------------------------------------------------------------------------
# examples
# --------------------------------------------------------------------------------------
def test_ceil_mode_drops_a_window_starting_in_the_right_padding():
    # 5 + 2*1 padded, kernel 2 stride 2: ceil would give 4 windows, the 4th starts at 6 >= 5+1.
    layer = make("nn.MaxPool1d", window_params([2], [2], [1], [1], True))
    assert layer.infer_shapes([(1, 1, 5)]) == [(1, 1, 3)]
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
    np.testing.assert_array_equal(layer.forward([x])[0], [[[0, 2, 4]]])


def test_avg_pool_cut_window_counts_only_input_and_padding():
    # 2x2 input, kernel 3 stride 2 ceil: one window cut to 2x2 -> divide by 4, not 9.
    x = np.array([[[[1, 2], [3, 6]]]], dtype=np.float32)
    got = make("F.avg_pool2d", dict(kernel_size=[3, 3], stride=[2, 2], padding=[0, 0], ceil_mode=True,
                                     count_include_pad=True, divisor_override=None)).forward([x])[0]
    np.testing.assert_array_equal(got, [[[[3.0]]]])


def test_lp_pool_is_a_p_norm_of_each_window():
    x = np.array([[[3.0, 4.0, 1.0, 2.0, 2.0]]], dtype=np.float32)
    got = make("F.lp_pool1d", dict(kernel_size=2, norm_type=2, stride=None)).forward([x])[0]
    np.testing.assert_allclose(got, [[[5.0, math.sqrt(5.0)]]], rtol=1e-6)
    max_norm = make("nn.LPPool1d", dict(kernel_size=2, norm_type=math.inf, stride=2, ceil_mode=True))
    inf = max_norm.forward([-x])[0]
    np.testing.assert_array_equal(inf, [[[4.0, 2.0, 2.0]]])
    assert got.dtype == inf.dtype == np.float32


def test_adaptive_avg_to_1x1_is_the_mean():
    x = np.random.default_rng(0).standard_normal((2, 5, 7, 9)).astype(np.float32)
    got = make("nn.AdaptiveAvgPool2d", dict(output_size=[1, 1])).forward([x])[0]
    assert got.shape == (2, 5, 1, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)


def test_output_size_none_written_as_text_keeps_the_dim():
    layer = make("nn.AdaptiveAvgPool2d", dict(output_size="(None,3)"))
    assert layer.infer_shapes([(1, 2, 5, 7)]) == [(1, 2, 5, 3)]


def test_tuple_output_when_the_module_returns_values_and_indices():
    layer = make("nn.AdaptiveMaxPool2d", dict(output_size=[2, 2], return_indices=True), outputs=1)
    (spec,) = layer.infer([TensorSpec((1, 1, 4, 4), np.float32)])
    assert isinstance(spec, SequenceSpec) and [s.dtype for s in spec.items] == [np.float32, np.int64]
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    ((values, indices),) = layer.forward([x])
    np.testing.assert_array_equal(values, [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(indices, [[[[5, 7], [13, 15]]]])


def test_inputs_are_not_modified_and_outputs_are_not_views():
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    before = x.copy()
    layers = [
        make("nn.MaxPool2d", window_params([1, 1], [1, 1], [0, 0], [1, 1], False)),
        make("nn.AvgPool2d", dict(kernel_size=[1, 1], stride=[1, 1], padding=[0, 0])),
        make("nn.AdaptiveAvgPool2d", dict(output_size=[5, 5])),
        make("nn.AdaptiveMaxPool2d", dict(output_size=[0, 0], return_indices=False)),
    ]
    for layer in layers:
        out = layer.forward([x])[0]
        np.testing.assert_array_equal(out, x)
        assert not np.shares_memory(out, x), layer
    np.testing.assert_array_equal(x, before)


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("op_type, params, outputs, words", [
    ("nn.MaxPool2d", dict(stride=[1, 1]), 1, "kernel_size"),
    ("nn.MaxPool2d", window_params([3, 3], [1, 1], [2, 0], [1, 1], False), 1, "half"),
    ("nn.MaxPool2d", window_params([3, 3], [0, 1], [0, 0], [1, 1], False), 1, "stride"),
    ("nn.MaxPool2d", window_params([3, 3], [1, 1], [0, 0], [1, 1], False, return_indices=False), 2,
     "return_indices"),
    ("nn.MaxPool1d", window_params([2, 2, 2], [1], [0], [1], False), 1, "kernel_size"),
    ("nn.AvgPool2d", dict(kernel_size=[2, 2], divisor_override=0), 1, "divisor_override"),
    ("nn.AvgPool2d", dict(kernel_size=[2, 2], ceil_mode="yes"), 1, "ceil_mode"),
    ("nn.LPPool2d", dict(kernel_size=[2, 2], norm_type=0.0), 1, "norm_type"),
    ("nn.AdaptiveAvgPool2d", dict(output_size=[1, 2, 3]), 1, "output_size"),
    ("nn.AdaptiveAvgPool2d", dict(output_size=[-1, 2]), 1, "negative"),
    ("nn.AdaptiveAvgPool2d", dict(output_size="(None,x)"), 1, "output_size"),
    ("F.adaptive_max_pool2d", dict(output_size=[2, 2], return_indices=True), 3, "outputs"),
])
def test_bad_params_name_the_operator(op_type, params, outputs, words):
    with pytest.raises(LayerConfigError) as info:
        make(op_type, params, outputs)
    message = str(info.value)
    assert op_type in message and words in message


@pytest.mark.parametrize("op_type, params, shape, words", [
    ("nn.MaxPool2d", window_params([3, 3], [1, 1], [0, 0], [1, 1], False), (1, 1, 2, 5), "larger"),
    ("nn.MaxPool2d", window_params([3, 3], [1, 1], [1, 1], [2, 2], False), (1, 1, 2, 5), "dilated"),
    ("nn.MaxPool2d", window_params([2, 2], [1, 1], [0, 0], [1, 1], False), (4, 4), "(N,C,H,W)"),
    ("nn.MaxPool1d", window_params([2], [1], [0], [1], False), (1, 1, 4, 4), "(N,C,L)"),
    ("nn.AvgPool1d", dict(kernel_size=[4]), (1, 1, 3), "larger"),
    ("nn.AdaptiveAvgPool2d", dict(output_size=[1, 1]), (5,), "(C,H,W)"),
    ("nn.AdaptiveMaxPool1d", dict(output_size=[2]), (1, 1, 0), "empty"),
])
def test_bad_shapes_say_why(op_type, params, shape, words):
    layer = make(op_type, params)
    with pytest.raises(ShapeMismatch, match=None) as info:
        layer.infer_shapes([shape])
    assert words in str(info.value)


def test_pools_sharing_scratch_stay_right_in_any_order():
    """Pooling keeps its padded input's frame between calls; pools of another layout (the
    frame elsewhere, or of another fill) run in between must never leave a stale one."""
    rng = np.random.default_rng(7)
    cases = [  # one padded shape (1, 4, 9, 9), the input at another place, or another fill
        ("max", (5, 5), (1, 1), (2, 2), rng.standard_normal((1, 4, 5, 5)).astype(np.float32)),
        ("max", (3, 3), (1, 1), (1, 1), rng.standard_normal((1, 4, 7, 7)).astype(np.float32)),
        ("avg", (3, 3), (1, 1), (1, 1), rng.standard_normal((1, 4, 7, 7)).astype(np.float32)),
        # large enough that only the frame is written (see FILL_WHOLE_MAX)
        ("max", (5, 5), (2, 2), (2, 2), rng.standard_normal((1, 8, 69, 69)).astype(np.float32)),
        ("max", (3, 3), (2, 2), (1, 1), rng.standard_normal((1, 8, 71, 71)).astype(np.float32)),
    ]
    runs = []
    for kind, k, s, p, x in cases:
        if kind == "max":
            layer = make("nn.MaxPool2d", window_params(k, s, p, (1, 1), False))
        else:
            layer = make("nn.AvgPool2d", dict(kernel_size=list(k), stride=list(s), padding=list(p)))
        want, _ = naive_window_pool(x, k, s, p, (1, 1), False, kind)
        runs.append((layer, x, want.astype(np.float32)))
    for layer, x, want in runs + runs[::-1] + runs:
        np.testing.assert_allclose(layer.forward([x])[0], want, rtol=1e-5, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([1, 3, 5, 7]), st.sampled_from([1, 3, 5]), st.integers(0, 12), st.integers(0, 12),
       st.sampled_from([(1, 2), (3,), (2, 5)]), st.booleans(), st.integers(0, 2**16))
def test_centred_pools_match_the_naive_loop(kh, kw, extra_h, extra_w, lead, include_pad, seed):
    """Stride 1 with half the kernel padded on each side (Inception's 3x3 pools): computed
    without a padded copy, the clipped border windows reduced again."""
    k, p = [kh, kw], [kh // 2, kw // 2]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(lead + (kh + 1 + extra_h, kw + 1 + extra_w)).astype(np.float32)
    if seed % 3 == 0:
        x[(..., rng.integers(x.shape[-2]), rng.integers(x.shape[-1]))] = np.nan  # a max keeps NaN
    got = make("nn.MaxPool2d", window_params(k, [1, 1], p, [1, 1], False)).forward([x])[0]
    want, _ = naive_window_pool(x, k, [1, 1], p, [1, 1], False, "max")
    np.testing.assert_array_equal(got, want.astype(np.float32))
    x = np.nan_to_num(x)
    params = {"kernel_size": k, "stride": [1, 1], "padding": p, "ceil_mode": False, "count_include_pad": include_pad}
    got = make("nn.AvgPool2d", params).forward([x])[0]
    want, _ = naive_window_pool(x, k, [1, 1], p, [1, 1], False, "avg", include_pad)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lp_pool_past_float32_is_inf_without_a_warning():
    """x ** p overflows to inf, and so does the pool, as in PyTorch; numpy warns of nothing."""
    layer = make("nn.LPPool2d", {"norm_type": 3.0, "kernel_size": [2, 2], "stride": [2, 2]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = layer.forward([np.full((1, 2, 4, 4), 1e30, np.float32)])
    assert np.isinf(y).all()
