"""Errors that say what to do: the other files pnnx writes name the file to pass instead, a
missing weight file says it is missing, and ``extract=`` takes operator names and lists
close matches for a wrong one (on the bundled Inception-style export)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from graphexec import Engine, InputError, ModelFormatError, WeightError, pnnx
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
MODEL = MODELS / "inception_mini.pnnx.param"


@pytest.fixture
def beside(tmp_path) -> Path:
    """The bundled model copied into a folder, as ``net.pnnx.param`` and ``net.pnnx.bin``."""
    shutil.copyfile(MODEL, tmp_path / "net.pnnx.param")
    shutil.copyfile(MODEL.with_suffix(".bin"), tmp_path / "net.pnnx.bin")
    return tmp_path


@pytest.mark.parametrize("name", ["net.pnnx.onnx", "net.ncnn.param", "net.ncnn.bin", "net.pnnx.bin",
                                  "net_pnnx.py", "net.pnnxsim.onnx"])
def test_a_file_pnnx_writes_beside_the_model_names_the_param_to_pass(beside, name):
    (beside / name).write_bytes(b"\x08\x07not a pnnx param file")
    with pytest.raises(ModelFormatError) as refused:
        Engine.load(beside / name)
    message = str(refused.value)
    assert message.startswith(f"{beside / name}: this is ")
    assert f"pass {beside / 'net.pnnx.param'} instead" in message, message


def test_ncnn_weights_given_as_the_bin_name_the_bin_to_pass(beside):
    with pytest.raises(ModelFormatError, match=r"ncnn's weights.*pass .*net\.pnnx\.bin instead"):
        Engine.load(beside / "net.pnnx.param", beside / "net.ncnn.bin")


@pytest.mark.parametrize(("name", "says"), [("net.pt", "graphexec.export"), ("net.onnx", "graphexec.convert")])
def test_other_formats_say_how_graphexec_takes_them(beside, name, says):
    with pytest.raises(ModelFormatError, match=says):
        pnnx.load(beside / name)


def test_the_right_files_still_load(beside):
    with Engine.load(beside / "net.pnnx.param", beside / "net.pnnx.bin") as engine:
        assert engine.forward(np.zeros((1, 3, 64, 64), np.float32)).shape == (1, 10)


def test_a_missing_weight_file_says_the_file_is_missing(beside):
    (beside / "net.pnnx.bin").unlink()
    with pytest.raises(WeightError) as missing:
        Engine.load(beside / "net.pnnx.param")
    message = str(missing.value)
    assert message.startswith(f"{beside / 'net.pnnx.bin'}: the weight file does not exist")
    assert missing.value.path == str(beside / "net.pnnx.bin")


def test_extract_takes_operator_names_as_well_as_operand_ids():
    engine = Engine.load(MODEL, threads=1)
    with np.load(MODELS / "inception_mini.io.npz") as io:
        x = io["in0"]
    # convbn2d_3 writes operand 8 (the param file's line for it: ... 1 1 7 8 ...)
    _, by_operand = engine.forward(x, extract=["8"])
    _, by_operator = engine.forward(x, extract=["convbn2d_3", "stem.1"])
    assert set(by_operator) == {"convbn2d_3", "stem.1"}
    np.testing.assert_array_equal(by_operator["convbn2d_3"], by_operand["8"])
    assert by_operator["stem.1"].shape == (1, 32, 16, 16)


def test_a_wrong_extract_name_lists_close_matches():
    engine = Engine.load(MODEL, threads=1)
    with pytest.raises(InputError) as wrong:
        engine.forward(np.zeros((1, 3, 64, 64), np.float32), extract=["convbn2d_33", "nothing like it"])
    message = str(wrong.value)
    assert "'convbn2d_33' (close matches: convbn2d_3" in message
    assert "'nothing like it'" in message and "no operator or operand is so named" in message
    assert "operator names (such as convbn2d_0" in message
