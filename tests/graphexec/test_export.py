"""graphexec.export: pnnx plus PyTorch's answer in one call, checked; TorchScript on the fly.

The tests that export need torch and pnnx (the export extra) and are skipped without them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import graphexec
from graphexec import Engine, GraphexecError, UnsupportedOperatorError
from graphexec.cli import main
from graphexec.exporting import ExportToolsMissing, _base, check_export, relative_error
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
HAVE_EXPORT_TOOLS = all(importlib.util.find_spec(m) is not None for m in ("torch", "pnnx"))
needs_export_tools = pytest.mark.skipif(
    not HAVE_EXPORT_TOOLS, reason="torch and pnnx are not installed (pip install -e '.[export]')"
)


def tiny_module():
    import torch
    from torch import nn

    class Tiny(nn.Module):
        """Two branches joined, and a second output: a tuple comes back flattened."""

        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, padding=1)
            self.b = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.relu(self.a(x)) + self.b(x), torch.sigmoid(self.b(x).mean((2, 3)))

    torch.manual_seed(0)
    return Tiny().eval(), torch.rand(1, 3, 8, 8)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    module, x = tiny_module()
    param = graphexec.export(module, x, folder / "tiny.pt")  # the .pt suffix is dropped
    return folder, param, module, x


def test_the_check_counts_a_nan_or_infinity_the_reference_lacks_as_an_infinite_error():
    want = np.array([1.0, -2.0, np.inf, np.nan])
    assert relative_error([want.copy()], [want]) == 0.0  # the same non-finite values: no error
    assert relative_error([want + [0.5, 0, 0, 0]], [want]) == 0.25  # against the largest finite |want|
    for wrong in (np.nan, np.inf, -np.inf):
        got = want.copy()
        got[0] = wrong
        assert relative_error([got], [want]) == np.inf, wrong
    got = want.copy()
    got[3] = 0.0  # a number where the reference is NaN
    assert relative_error([got], [want]) == np.inf
    assert relative_error([np.full(3, np.nan)], [np.zeros(3)]) == np.inf
    assert relative_error([np.zeros((2, 3))], [np.zeros(6)]) == np.inf  # shapes differ

@needs_export_tools
def test_export_writes_the_model_and_pytorchs_answer(exported):
    folder, param, _, x = exported
    assert param == folder / "tiny.pnnx.param"
    assert sorted(p.name for p in folder.iterdir()) == ["tiny.io.npz", "tiny.pnnx.bin", "tiny.pnnx.param"]
    with np.load(folder / "tiny.io.npz") as io:
        assert sorted(io.files) == ["in0", "out0", "out1"]
        np.testing.assert_array_equal(io["in0"], x.numpy())
        assert io["out0"].shape == (1, 4, 8, 8) and io["out1"].shape == (1, 4)


@needs_export_tools
def test_engine_reproduces_the_export(exported):
    folder, param, _, _ = exported
    with np.load(folder / "tiny.io.npz") as io, Engine.load(param) as engine:
        got = engine.forward(io["in0"])
        assert relative_error(got, [io["out0"], io["out1"]]) < 1e-5
    assert check_export(param) < 1e-5


@needs_export_tools
def test_a_pt_model_is_converted_once_into_the_cache(exported, tmp_path, capsys):
    import torch

    folder, _, module, x = exported
    pt = tmp_path / "tiny.pt"
    torch.jit.trace(module, x).save(str(pt))
    cache = tmp_path / "cache"
    args = ["info", str(pt), "--input-shape", "1,3,8,8", "--cache-dir", str(cache)]
    assert main(args) == 0
    assert "input  in0: (1, 3, 8, 8)" in capsys.readouterr().out
    converted = list(cache.glob("tiny-*/model.pnnx.param"))
    assert len(converted) == 1 and sorted(p.name for p in converted[0].parent.iterdir()) == [
        "model.pnnx.bin", "model.pnnx.param"]
    stamp = converted[0].stat().st_mtime_ns
    assert main(["run", str(pt), "--input", str(folder / "tiny.io.npz"), "--cache-dir", str(cache)]) == 0
    assert converted[0].stat().st_mtime_ns == stamp and len(list(cache.iterdir())) == 1  # reused


def test_check_raises_when_a_layer_is_missing():
    # A real pnnx export whose aten::i0 has no layer (examples/custom_layer.py registers one).
    with pytest.raises(UnsupportedOperatorError, match="aten::i0"):
        check_export(MODELS / "bessel_gate.pnnx.param")


def test_check_raises_on_a_difference(tmp_path):
    for suffix in (".pnnx.param", ".pnnx.bin"):
        (tmp_path / f"m{suffix}").write_bytes((MODELS / f"two_heads{suffix}").read_bytes())
    with np.load(MODELS / "two_heads.io.npz") as io:
        arrays = dict(io)
    arrays["out1"] = arrays["out1"] + 0.01
    np.savez(tmp_path / "m.io.npz", **arrays)
    with pytest.raises(GraphexecError, match="differ from PyTorch's by"):
        check_export(tmp_path / "m.pnnx.param")
    assert check_export(tmp_path / "m.pnnx.param", tolerance=0.1) < 0.1


def test_without_torch_or_pnnx_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "pnnx", None)
    with pytest.raises(ExportToolsMissing, match=r"pip install 'graphexec\[export\]'"):
        graphexec.export(object(), (), tmp_path / "m")
    assert issubclass(ExportToolsMissing, ImportError)


def test_path_names_the_model_with_or_without_suffix():
    for given in ("out/net", "out/net.pt", "out/net.pnnx.param", "out/net.io.npz"):
        assert _base(given) == Path("out/net")
    assert _base("out/.pt") == Path("out/.pt")


def test_export_is_the_function_even_after_importing_its_module():
    import graphexec.exporting as module

    assert graphexec.export is module.export
    assert "export" in graphexec.__all__


@needs_export_tools
def test_a_transformer_exports_with_the_trace_check_off_and_matches(tmp_path):
    """nn.TransformerEncoderLayer's eval fast path fails TorchScript's trace check: the error
    says what to pass, and with it the export runs and matches PyTorch (checked inside)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    x = torch.rand(2, 5, 16)
    with pytest.raises(GraphexecError, match="^pass check_trace=False") as refused:
        graphexec.export(layer, x, tmp_path / "strict")
    assert len(str(refused.value)) < 1000  # TorchScript's own message, tens of kB, is the cause
    param = graphexec.export(layer, x, tmp_path / "layer", check_trace=False)
    assert "nn.MultiheadAttention" in param.read_text()


@needs_export_tools
def test_a_causal_mask_given_to_a_transformer_stays_in_the_export(tmp_path):
    """PyTorch recognises a causal mask given to nn.TransformerEncoder and traces is_causal
    without it, which pnnx's attention does not keep: the export keeps it a mask, read by
    the attention, and matches PyTorch (checked inside); the PyTorch module is unchanged."""
    import torch
    from torch import nn
    from torch.nn.modules import transformer

    detect = transformer._detect_is_causal_mask
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, x, mask):
            return self.encoder(x, mask=mask)

    x, mask = torch.rand(2, 6, 16), nn.Transformer.generate_square_subsequent_mask(6)
    param = graphexec.export(Masked().eval(), (x, mask), tmp_path / "causal", check_trace=False)
    engine = Engine.load(param)
    assert all(operand.consumers for operand in engine.graph.input_operands)
    assert transformer._detect_is_causal_mask is detect


@needs_export_tools
def test_a_model_returning_a_dict_exports_its_values_in_order(tmp_path):
    """TorchScript's tracer refuses a dict or a None among the outputs (torchvision's
    segmentation models return ``{"out": ..., "aux": ...}``): the values come out
    flattened, in order, the None left out."""
    import torch
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = self.body(x)
            return {"out": torch.relu(y), "aux": [y.mean((2, 3)), None, torch.sigmoid(y)]}

    torch.manual_seed(0)
    module, x = Heads().eval(), torch.rand(1, 3, 8, 8)
    param = graphexec.export(module, x, tmp_path / "heads")  # checked inside
    with torch.no_grad():
        want = module(x)
    got = Engine.load(param).forward(x.numpy())
    assert [g.shape for g in got] == [(1, 4, 8, 8), (1, 4), (1, 4, 8, 8)]
    for g, w in zip(got, (want["out"], want["aux"][0], want["aux"][2]), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_an_export_failure_puts_the_hint_first_and_quotes_the_cause_short():
    from graphexec.exporting import QUOTED_CHARS, _export_failure

    check = RuntimeError("Tracing failed sanity checks!\nERROR: Graphs differed across invocations!\n" + "x" * 30000)
    text = _export_failure(check)
    assert text.startswith("pass check_trace=False")
    assert "pnnx could not export the model: RuntimeError: Tracing failed sanity checks!" in text
    assert len(text) < QUOTED_CHARS + 400 and text.endswith("(the rest in the cause)")
    other = _export_failure(ValueError("an operator pnnx cannot convert"))
    assert other == "pnnx could not export the model: ValueError: an operator pnnx cannot convert"


@needs_export_tools
def test_a_converter_that_stops_without_a_model_is_said_so(tmp_path):
    """pnnx's converter crashes on a module whose output the forward never uses, and pnnx
    then fails reading a file it did not write: the error says which step stopped."""
    import torch
    from torch import nn

    class DeadPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.pool = nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            y = self.conv(x)
            self.pool(y)  # computed, never used
            return y

    try:
        graphexec.export(DeadPool().eval(), torch.rand(1, 3, 8, 8), tmp_path / "dead")
    except GraphexecError as exc:
        assert str(exc).startswith("pnnx's converter stopped without writing a model"), exc
    else:
        pytest.skip("this pnnx converts such a module")


@needs_export_tools
def test_a_converter_that_stops_is_quoted_where_it_said_why(tmp_path, capfd):
    """A module that caches a tensor sized at its first call runs differently at the second
    shape of a dynamic export; pnnx's converter (a program of its own) prints why it stopped,
    and the error quotes it, the text still reaching the standard error."""
    import torch
    from torch import nn

    class CachedBias(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = None

        def forward(self, x):
            if self.bias is None:
                self.bias = torch.arange(x.shape[1]).float()
            return x + self.bias

    with pytest.raises(GraphexecError) as caught:
        graphexec.export(CachedBias().eval(), torch.rand(2, 5), tmp_path / "cached", dynamic_inputs=torch.rand(2, 7))
    message = str(caught.value)
    assert message.startswith("pnnx's converter stopped without writing a model, its last words: "), message
    assert "must match the size of tensor b (5)" in message and "dynamic_inputs" in message
    assert "must match the size of tensor b (5)" in capfd.readouterr().err


@needs_export_tools
def test_a_dynamic_export_is_checked_at_its_second_shape_too(tmp_path):
    """pnnx folds the std of a linspace over a convolution's output length into a constant
    (tsai's coordinate channels): right at the exported length, wrong at any other, which
    only a check at the dynamic_inputs' shapes sees; a slice pnnx drops on a dynamic dim is
    wrong at both, and the check names the shapes."""
    import torch
    from torch import nn

    class Coord(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            ramp = torch.linspace(-1, 1, y.shape[-1])
            return y + ramp / ramp.std()

    class Chomp(nn.Module):
        def forward(self, x):
            return x[:, :, :-2]

    class Cropped(nn.Module):
        def forward(self, x):
            return x[:, :, : x.shape[2] - 2] * 2

    torch.manual_seed(0)
    x, other = torch.randn(1, 3, 16), torch.randn(2, 3, 24)
    coord = Coord().eval()
    graphexec.export(coord, x, tmp_path / "coord")  # the exported shape alone: right
    with pytest.raises(GraphexecError, match=r"by .* at the dynamic_inputs' shapes \(2, 3, 24\), not at the exported"):
        graphexec.export(coord, x, tmp_path / "coord_dynamic", dynamic_inputs=other)
    try:
        graphexec.export(Chomp(), x, tmp_path / "chomp", dynamic_inputs=other)
    except GraphexecError as exc:
        assert "graphexec's output 0 has shape (1, 3, 16), PyTorch's (1, 3, 14)" in str(exc)
    else:
        pytest.skip("this pnnx keeps a negative-end slice on a dynamic dim")
    param = graphexec.export(Cropped(), x, tmp_path / "cropped", dynamic_inputs=other)
    with Engine.load(param) as engine:
        assert engine.forward(other.numpy()).shape == (2, 3, 22)


@needs_export_tools
def test_a_boolean_input_exports_and_runs_at_its_second_shape(tmp_path):
    """A boolean mask given as an input (a guidance's ``cond_keep_mask``): pnnx's export
    names its type f32, and its converter refuses that; graphexec.export names it bool."""
    import torch
    from torch import nn

    class Masked(nn.Module):
        def forward(self, x, keep):
            return torch.where(keep, x, torch.zeros_like(x)) * 2

    torch.manual_seed(0)
    x, keep = torch.randn(2, 3), torch.rand(2, 3) > 0.5
    other = (torch.randn(3, 4), torch.rand(3, 4) > 0.5)
    param = graphexec.export(Masked(), (x, keep), tmp_path / "masked", dynamic_inputs=other)
    with Engine.load(param) as engine:
        got = engine.forward(other[0].numpy(), other[1].numpy())
    np.testing.assert_array_equal(got, Masked()(*other).numpy())


@needs_export_tools
def test_a_model_that_scales_its_input_in_place_exports_and_checks_clean(tmp_path):
    """A model that writes into its input (``x *= 255``, as image restoration nets scale
    theirs) changed the inputs the export stored and checked against, so the check failed by
    a factor of 255 on a right graph, and the caller's tensors were scaled too."""
    import torch
    from torch import nn

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            x *= 255.0
            return self.conv(x)

    torch.manual_seed(0)
    model = Scaled().eval()
    x, other = torch.rand(1, 3, 8, 8), torch.rand(2, 3, 10, 12)
    given = (x.clone(), other.clone())
    param = graphexec.export(model, x, tmp_path / "scaled", dynamic_inputs=other)
    assert torch.equal(x, given[0]) and torch.equal(other, given[1])
    with np.load(tmp_path / "scaled.io.npz") as stored:
        np.testing.assert_array_equal(stored["in0"], given[0].numpy())
    with Engine.load(param) as engine, torch.no_grad():
        got = engine.forward(other.numpy())
        want = model(other.clone()).numpy()
    assert relative_error([got], [want]) <= 1e-5


@needs_export_tools
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_model_or_input_is_refused_before_pnnx_runs(tmp_path, dtype):
    """pnnx's converter runs the trace on float32 tensors and stops on the dtype mismatch
    with a message that does not say so: the export refuses first and says what to do."""
    import torch

    half = getattr(torch, dtype)
    module, x = tiny_module()
    with pytest.raises(GraphexecError, match=rf"'a.weight' is torch.{dtype}: pnnx converts float32 models only"):
        graphexec.export(module.to(half), x.to(half), tmp_path / "half")
    with pytest.raises(GraphexecError, match=rf"example input 0 is torch.{dtype}"):
        graphexec.export(module.float(), x.to(half), tmp_path / "half")
    assert not list(tmp_path.iterdir())  # refused before anything was written


@needs_export_tools
def test_activations_pnnx_cannot_convert_in_place_export_out_of_place(tmp_path):
    """pnnx's converter crashes on an in-place nn.ELU (VNet's), nn.CELU, nn.Hardtanh,
    nn.Threshold or nn.RReLU: they are traced out of place, and left in place afterwards;
    where the model reads such a module's input again, the check says why it differs."""
    import torch
    from torch import nn

    from graphexec.exporting import CRASHING_IN_PLACE

    class InPlace(nn.Module):
        def __init__(self, reread: bool):
            super().__init__()
            self.reread = reread
            self.acts = nn.ModuleList(getattr(nn, name)(*([0.1, 2.0] if name == "Threshold" else []), inplace=True)
                                      for name in CRASHING_IN_PLACE)

        def forward(self, x):
            y = x * 2
            z = y
            for act in self.acts:
                z = act(z)
            return y + z if self.reread else z

    model = InPlace(reread=False)
    graphexec.export(model, torch.randn(1, 3, 8, 8), tmp_path / "in_place")  # checked against PyTorch
    assert all(act.inplace for act in model.acts)
    with pytest.raises(GraphexecError, match=r"differ.*in-place nn.CELU, nn.ELU, .* modules were exported out of place"):
        graphexec.export(InPlace(reread=True), torch.randn(1, 3, 8, 8), tmp_path / "reread")

