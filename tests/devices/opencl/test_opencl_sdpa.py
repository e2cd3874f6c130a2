"""``F.scaled_dot_product_attention`` on the device against the CPU layer: batch dims
broadcast, grouped-query heads, masks (float or boolean, broadcast along any dim), causal,
an explicit scale, queries that see no key (zeros on both sides), and the cases left to the
CPU. Tolerance as for every kernel (tests/devices/opencl/test_opencl_kernels.py)."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import TensorSpec
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import make_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, built, check, data

F32 = np.dtype(np.float32)


def sdpa(mask=False, **params):
    names = ["query", "key", "value"] + (["attn_mask"] if mask else [])
    return make_layer("F.scaled_dot_product_attention", params, inputs=len(names), names=names)


@st.composite
def attention_cases(draw):
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=4)))
    gqa = len(lead) >= 1 and draw(st.booleans())
    group = draw(st.integers(2, 3)) if gqa else 1
    q_lead = lead[:-1] + (lead[-1] * group,) if gqa else lead
    k_lead = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in lead)  # some dims broadcast
    length, source = draw(st.integers(1, 9)), draw(st.integers(1, 70))
    e, ev = draw(st.sampled_from([4, 8, 16, 17])), draw(st.sampled_from([4, 8, 5]))
    mask = draw(st.sampled_from([None, None, "float", "bool"]))
    mask_shape = None
    if mask:
        full = q_lead + (length, source)
        keep = len(full) - draw(st.integers(0, len(full) - 1))  # trailing dims kept, leading ones dropped
        mask_shape = tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in full[len(full) - keep:])
    causal = mask is None and draw(st.booleans())
    scale = draw(st.sampled_from([None, 0.3]))
    return q_lead, k_lead, gqa, length, source, e, ev, mask, mask_shape, causal, scale, draw(st.integers(0, 2**16))


@SETTINGS
@given(attention_cases())
def test_sdpa_matches_cpu(device, case):
    q_lead, k_lead, gqa, length, source, e, ev, mask, mask_shape, causal, scale, seed = case
    params = {"is_causal": causal, "enable_gqa": gqa} | ({"scale": scale} if scale is not None else {})
    shapes = [q_lead + (length, e), k_lead + (source, e), k_lead + (source, ev)]
    arrays = [data(seed, shapes[0]), data(seed + 1, shapes[1]), data(seed + 2, shapes[2])]
    if mask == "bool":
        arrays.append(np.random.default_rng(seed + 3).random(mask_shape) < 0.7)
    elif mask == "float":
        arrays.append(data(seed + 3, mask_shape, 2.0))
    layer = built(lambda: sdpa(mask is not None, **params), [a.shape for a in arrays])
    reason = device.unsupported_reason(layer, [TensorSpec(a.shape, a.dtype) for a in arrays])
    assume(reason is None or "three batch dims" not in reason)  # four that broadcast differently
    check(device, layer, arrays)


def test_sdpa_queries_that_see_no_key_get_zeros(device):
    q, k, v = data(1, (2, 3, 5, 8)), data(2, (2, 3, 6, 8)), data(3, (2, 3, 6, 4))
    allowed = np.ones((5, 6), bool)
    allowed[1] = False
    got = check(device, sdpa(True), [q, k, v, allowed])[0]
    assert (got[:, :, 1] == 0).all() and (got[:, :, [0, 2, 3, 4]] != 0).all()
    additive = np.zeros((2, 1, 5, 6), np.float32)
    additive[1, :, 4] = -np.inf
    got = check(device, sdpa(True), [q, k, v, additive])[0]
    assert (got[1, :, 4] == 0).all() and (got[0] != 0).all()


def test_sdpa_causal_with_more_queries_than_keys(device):
    """Query i sees keys 0..i: the rows past the last key see them all."""
    check(device, sdpa(is_causal=True), [data(1, (2, 9, 8)), data(2, (2, 4, 8)), data(3, (2, 4, 8))])


def test_sdpa_cases_left_to_the_cpu(device):
    f32 = [TensorSpec((2, 3, 5, 8), F32)] * 3
    assert "int64" in device.unsupported_reason(sdpa(True), f32 + [TensorSpec((5, 5), np.dtype(np.int64))])
    assert "float64" in device.unsupported_reason(sdpa(), [TensorSpec((2, 3, 5, 8), np.dtype(np.float64))] * 3)
    alike = [TensorSpec((2, 2, 2, 2, 5, 8), F32)] * 3  # batch dims that merge into one
    assert device.unsupported_reason(sdpa(), alike) is None
    q, kv = TensorSpec((2, 2, 2, 2, 5, 8), F32), TensorSpec((2, 1, 2, 1, 5, 8), F32)
    assert "three batch dims" in device.unsupported_reason(sdpa(), [q, kv, kv])
    empty = [TensorSpec((2, 0, 5, 8), F32)] * 3
    assert "empty" in device.unsupported_reason(sdpa(), empty)
