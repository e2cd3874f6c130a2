"""Export small networks (torchvision's, a token classifier, a module of operators) to ONNX with
onnxruntime's answers, into tests/fixtures/onnx/.

For each network: ``<name>.onnx`` (``torch.onnx.export``, random weights, batch-norm
statistics made non-trivial) and ``<name>.ort.npz`` holding the input ``in0`` and
onnxruntime's output ``out0`` on it. ``tests/test_onnx.py`` converts each file with pnnx
(``graphexec.convert``) and checks graphexec's output against onnxruntime's, so the test
needs pnnx but neither torch nor onnxruntime. The module of the operators pnnx leaves under
their ONNX names is also kept converted, as a golden fixture under tests/fixtures/ops/onnx/.
Needs torch, torchvision, pnnx, onnx and onnxruntime (the export extra plus ``pip install
onnx onnxruntime``). Usage::

    python tools/export_onnx_fixtures.py [name ...]
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import torch
import torchvision

TARGET = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "onnx"


class Network:
    """A network as exported: how to build it, the shape it is exported at, the shape its
    reference runs at (another batch where the batch is left dynamic), and, for a model
    reading token ids (int64), how many tokens there are."""

    def __init__(self, build: Callable[[], torch.nn.Module], shape: tuple[int, ...],
                 run_shape: tuple[int, ...] | None = None, tokens: int | None = None):
        self.build, self.shape, self.tokens = build, shape, tokens
        self.run_shape = run_shape or shape

    def example(self, shape: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng(0)
        if self.tokens is not None:
            return rng.integers(0, self.tokens, shape, dtype=np.int64)
        return rng.random(shape, dtype=np.float32)

    @property
    def dynamic_batch(self) -> bool:
        return self.run_shape != self.shape


class TokenClassifier(torch.nn.Module):
    """Token ids in (int64), class scores out: an embedding averaged over the sequence."""

    def __init__(self, tokens: int = 50, width: int = 16, classes: int = 4):
        super().__init__()
        self.embedding = torch.nn.Embedding(tokens, width)
        self.head = torch.nn.Linear(width, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(ids).mean(1))


class OnnxOperators(torch.nn.Module):
    """The operators pnnx leaves under their ONNX names (CumSum, TopK, ArgMax, ArgMin,
    GatherElements, Gather and Pad of an unfold, IsNaN, IsInf, Mod, OneHot, Trilu, ReduceMax
    and ReduceMin over two axes; a Gather of constant indices, which pnnx makes a select of a list;
    ScatterElements, with and without a reduction, and ScatterND; a Split without sizes,
    which pnnx leaves without them; integer divisions, whose Div rounds toward zero), their
    results flattened into one vector."""

    def __init__(self):
        super().__init__()
        self.register_buffer("picks", torch.randint(0, 32, (1, 10, 5)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, indices = torch.topk(x, 3, dim=1)
        smallest, where = torch.topk(x, 2, dim=-1, largest=False)
        ints = (x * 10).long()
        signed = ((x - 0.5) * 10).long()
        pieces = [
            torch.cumsum(x, dim=1), torch.cumsum(x, dim=-1), values, indices, smallest, where,
            x.argmax(-1, keepdim=True), x.argmin(1), torch.gather(x, 2, self.picks),
            torch.where(torch.isnan(torch.log(x)), torch.zeros_like(x), x), ints % 3, torch.fmod(x * 5, 3.0),
            torch.nn.functional.one_hot(ints.abs().clamp(max=4), 5).sum(-2), torch.tril(x[0, :, :10]),
            torch.triu(x[0, :, 10:20], 1), x / x.abs().amax(dim=(1, 2), keepdim=True),
            torch.nn.functional.unfold(x.reshape(1, 2, 10, 16), 3, padding=1),
            x[:, torch.tensor([3, 1, 7])],  # a Gather of constant indices: a select of a list, to pnnx
            torch.scatter(x, 2, self.picks, x[:, :, :5] * 2),
            torch.scatter_add(x, 2, self.picks, x[:, :, 5:10]),  # ScatterElements reduction=add
            x.index_put((torch.tensor([0, 0]), torch.tensor([2, 7])), x[0, :2] * 3),  # ScatterND
            torch.nn.functional.glu(x, -1),  # a Split without sizes: split_size_or_sections=None, to pnnx
            x[:, :, [-2]],  # a Gather of one constant index: a select of a number, the dim annotated kept
            x.amin(dim=(1, 2), keepdim=True), torch.isinf(1 / (x - x[0, 0, 0])),
            # integer divisions of negative numbers: ONNX's Div rounds toward zero
            signed.div(4, rounding_mode="floor"), signed.div(4, rounding_mode="trunc"),
        ]
        return torch.cat([p.float().flatten() for p in pieces])


class RecurrentStates(torch.nn.Module):
    """Recurrences whose sequence output (or an LSTM's cell state) goes unread, which pnnx
    leaves as ONNX's LSTM, GRU and RNN: a two-layer bidirectional LSTM's final h and c, a
    bidirectional GRU's final h from a given initial state, a relu RNN's, an LSTM's output
    and final h but not its c; each flattened into one vector."""

    def __init__(self, width: int = 8, hidden: int = 6):
        super().__init__()
        self.lstm = torch.nn.LSTM(width, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(width, hidden, bidirectional=True)
        self.rnn = torch.nn.RNN(width, hidden, nonlinearity="relu", batch_first=True)
        self.tagger = torch.nn.LSTM(width, hidden, batch_first=True)
        self.register_buffer("h0", torch.randn(2, 1, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, c) = self.lstm(x)
        _, g = self.gru(x.transpose(0, 1), self.h0)
        _, r = self.rnn(x)
        y, (t, _) = self.tagger(x)
        return torch.cat([v.flatten() for v in (h, c, g, r, y, t)])


class LSTMClassifier(torch.nn.Module):
    """An LSTM from its default zero state, a class per sequence from the last step: the
    exporter sizes the zero state by the batch (``Shape``, ``Concat``, ``ConstantOfShape``),
    which a conversion that keeps the batch dynamic leaves for the run to compute."""

    def __init__(self, width: int = 8, hidden: int = 16, classes: int = 4):
        super().__init__()
        self.rnn = torch.nn.LSTM(width, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


#: Small enough to commit (0.5 and 1.4 MB): squeeze-and-excitation, hardswish, depthwise
#: convolutions; channel splits and shuffles. mobilenet_v3_small leaves its batch dynamic,
#: so the test fixes it with ``input_shapes``; so does the token classifier, whose input is
#: int64, which pnnx then needs to be told. The last two hold the operators pnnx leaves as
#: ONNX's.
NETWORKS = {
    "mobilenet_v3_small": Network(lambda: torchvision.models.mobilenet_v3_small(width_mult=0.25, num_classes=10),
                                  (1, 3, 64, 64), (2, 3, 64, 64)),
    "shufflenet_v2": Network(lambda: torchvision.models.shufflenet_v2_x0_5(num_classes=10), (1, 3, 64, 64)),
    "token_classifier": Network(TokenClassifier, (1, 6), (2, 6), tokens=50),
    "onnx_operators": Network(OnnxOperators, (1, 10, 32)),
    "recurrent_states": Network(RecurrentStates, (1, 7, 8)),
    "lstm_classifier": Network(LSTMClassifier, (2, 5, 8), (3, 5, 8)),
}


def export(name: str, target: Path = TARGET) -> Path:
    """Export network ``name`` to ``target/<name>.onnx`` with onnxruntime's output; return the path."""
    network = NETWORKS[name]
    torch.manual_seed(0)
    model = network.build().eval()
    with torch.no_grad():  # non-trivial statistics, as a trained network has
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{name}.onnx"
    dynamic = {"in0": {0: "batch"}, "out0": {0: "batch"}} if network.dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation notice
        torch.onnx.export(model, (torch.from_numpy(network.example(network.shape)),), str(path), dynamo=False,
                          opset_version=17, input_names=["in0"], output_names=["out0"], dynamic_axes=dynamic)
    x = network.example(network.run_shape)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"in0": x})
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    error = float(np.abs(y - want).max() / np.abs(want).max())
    np.savez_compressed(target / f"{name}.ort.npz", in0=x, out0=y)
    print(f"{name}: {path.stat().st_size / 1e3:.0f} kB, onnxruntime vs PyTorch {error:.1e}")
    return path


#: Networks whose pnnx conversion is also kept as a per-operator golden fixture (the golden
#: tests need every operator graphexec registers in one, and these operators come only from
#: ONNX): tests/fixtures/ops/onnx/<name>/, onnxruntime's output as the reference.
AS_OPERATOR_FIXTURES = ("onnx_operators", "recurrent_states")
OPS_TARGET = TARGET.parent / "ops" / "onnx"


def keep_as_operator_fixture(name: str, target: Path = TARGET) -> Path:
    """Convert ``target/<name>.onnx`` with pnnx into ``OPS_TARGET/<name>/`` beside its input
    and onnxruntime's output (``io.npz``), as the golden fixtures hold them."""
    import graphexec

    folder = OPS_TARGET / name
    folder.mkdir(parents=True, exist_ok=True)
    with np.load(target / f"{name}.ort.npz") as reference:
        x, y = reference["in0"], reference["out0"]
    graphexec.convert(target / f"{name}.onnx", input_shapes=[x.shape], output=folder / "model")
    np.savez_compressed(folder / "io.npz", in0=x, out0=y)
    print(f"{name}: kept as a golden fixture in {folder}")
    return folder


if __name__ == "__main__":
    for network_name in sys.argv[1:] or NETWORKS:
        export(network_name)
        if network_name in AS_OPERATOR_FIXTURES:
            keep_as_operator_fixture(network_name)
