"""What a caller may pass to ``forward``: every input is checked before anything is
allocated for it, and everything the model cannot take is an InputError (or
InputShapeError) that says what was expected and what was given, without numpy warnings."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

from graphexec import Engine, GraphexecError, InputError, InputShapeError
from graphexec.ir import Graph
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
INCEPTION = MODELS / "inception_mini.pnnx.param"


@pytest.fixture(scope="module")
def engine():
    with Engine.load(INCEPTION, threads=2, memory_limit=256 << 20) as engine:
        yield engine


def _traced_peak(call) -> int:
    """The most bytes Python and numpy held at once during ``call()`` beyond what they held
    before (numpy reports its array data to tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        call()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_the_memory_limit_is_checked_before_an_input_is_cast(engine):
    """A float64 view of 3 GiB that owns no memory (broadcast) would become a 1.5 GiB float32
    copy if it were cast first; it is refused having allocated next to nothing."""
    x = np.broadcast_to(np.float64(1.0), (1, 3, 16384, 8192))

    def call():
        with pytest.raises(InputShapeError, match="memory_limit"):
            engine.forward(x)

    assert _traced_peak(call) < 32 << 20


def test_checking_inputs_for_nan_needs_no_copy_of_them(engine):
    x = np.broadcast_to(np.float32(np.nan), (1, 3, 64, 64)).copy()
    big = np.zeros((1, 3, 1024, 1024), np.float32)
    big[0, 2, 1000, 3] = np.inf
    engine.plan(x.shape), engine.plan(big.shape)  # planned first: a plan's kernels are prepared on zeros

    def call():
        for value in (x, big):
            with pytest.raises(InputError, match="already holds NaN or Inf"):
                engine.forward(value, check_finite=True)

    assert _traced_peak(call) < big.nbytes // 8  # np.isfinite(big) alone would take big.nbytes / 4


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_a_complex_input_to_a_real_model_is_refused(engine, dtype):
    x = np.ones((1, 3, 64, 64), dtype) * (1 + 2j)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way either
        with pytest.raises(InputError, match="imaginary part"):
            engine.forward(x)
    assert engine.forward(x.real).shape == (1, 10)


def test_a_float64_beyond_float32s_range_becomes_inf_without_a_warning(engine):
    x = np.ones((1, 3, 64, 64))
    x[0, 0, 0, 0] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="NaN or Inf"):
            engine.forward(x, check_finite=True)


def _identity(dtype: str) -> Graph:
    """A model that hands its input back (the input check is all there is to it)."""
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = (2, 3), dtype
    g.add_operator("pnnx.Output", "output", ["x"], [])
    return g


def test_a_wider_integer_input_is_taken_only_within_the_models_range():
    with Engine(_identity("i32"), threads=1) as engine:
        got = engine.forward(np.arange(6, dtype=np.int64).reshape(2, 3) - 3)
        assert got.dtype == np.int32 and got.tolist() == [[-3, -2, -1], [0, 1, 2]]
        with pytest.raises(InputError, match="outside int32's range"):
            engine.forward(np.full((2, 3), 2**40, np.int64))
        with pytest.raises(InputError, match="outside int32's range"):
            engine.forward(np.full((2, 3), -(2**31) - 1, np.int64))


HOSTILE = {
    "object array": (lambda: np.array([[[[object()]]]], dtype=object), InputError, "given object"),
    "strings": (lambda: np.full((1, 3, 64, 64), "a"), InputError, "given <U1"),
    "booleans": (lambda: np.ones((1, 3, 64, 64), bool), InputError, "given bool"),
    "integers": (lambda: np.ones((1, 3, 64, 64), np.int64), InputError, "given int64"),
    "structured": (lambda: np.zeros((1, 3, 64, 64), dtype=[("a", "f4")]), InputError, "expected dtype float32"),
    "datetimes": (lambda: np.zeros((1, 3, 64, 64), dtype="M8[s]"), InputError, "datetime64"),
    "bytes": (lambda: b"abc", InputError, "given |S3"),
    "None": (lambda: None, InputError, "given object"),
    "a generator": (lambda: (i for i in range(3)), InputError, "given object"),
    "a ragged list": (lambda: [[1.0, 2.0], [3.0]], InputError, "cannot be read as an array"),
    "a scalar": (lambda: 1.0, InputShapeError, "rank 4"),
    "rank 5": (lambda: np.ones((1, 1, 3, 64, 64), np.float32), InputShapeError, "rank 4"),
    "no pixels": (lambda: np.ones((1, 3, 0, 0), np.float32), InputShapeError, "cannot take"),
    "too few channels": (lambda: np.ones((1, 4, 64, 64), np.float32), InputShapeError, "cannot take"),
    "2^40 images, as a view": (lambda: np.broadcast_to(np.float32(0), (2**40, 3, 64, 64)), InputShapeError,
                               "memory_limit"),
    "2^31 rows, as a view": (lambda: np.broadcast_to(np.float32(0), (1, 3, 2**31, 2)), InputShapeError, ""),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_inputs_are_input_errors(engine, name):
    make, error, text = HOSTILE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error, match=None if not text else text.replace("|", r"\|").replace("^", r"\^")) as info:
            engine.forward(make())
    assert isinstance(info.value, GraphexecError)
    assert len(str(info.value)) < 1000


@pytest.mark.parametrize("make", [
    lambda: np.ones((1, 3, 64, 64), ">f4"),                     # big-endian
    lambda: np.ones((1, 3, 64, 64), np.float16),
    lambda: np.ones((1, 3, 128, 128), np.float32)[:, :, ::2, ::2],  # strided
    lambda: np.ones((1, 3, 64, 64), np.float32)[:, :, ::-1],      # negative strides
    lambda: np.zeros((0, 3, 64, 64), np.float32),                 # an empty batch
], ids=["big-endian", "float16", "strided", "reversed", "empty batch"])
def test_unusual_but_valid_arrays_give_the_answer_of_a_plain_one(engine, make):
    x = make()
    want = engine.forward(np.ascontiguousarray(x, np.float32))
    assert np.array_equal(engine.forward(x), want)
