"""graphexec.errors: one hierarchy, drawn in the module docstring; and the public surface."""

from __future__ import annotations

import inspect
import re

import graphexec
from graphexec import errors
from graphexec.errors import (
    ExecutionError,
    GraphexecError,
    LayerConfigError,
    ModelFormatError,
    NonFiniteError,
    RowError,
    UnsupportedOperatorError,
    WeightError,
)

CLASSES = {
    name: obj
    for name, obj in vars(errors).items()
    if inspect.isclass(obj) and issubclass(obj, BaseException) and not issubclass(obj, Warning)
    and obj.__module__ == errors.__name__
}
WARNINGS = {
    name: obj for name, obj in vars(errors).items()
    if inspect.isclass(obj) and issubclass(obj, Warning) and obj.__module__ == errors.__name__
}


def drawn_tree() -> dict[str, str | None]:
    """Each class named in the docstring's tree, with the parent it is drawn under."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        match = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z][A-Za-z]+Error)\b", line)
        if not match:
            continue
        depth = len(line) - len(line.lstrip(" │├└─"))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, match.group(2)))
    return parents


def test_every_error_is_a_graphexec_error_and_drawn_where_it_belongs():
    tree = drawn_tree()
    assert set(tree) == set(CLASSES), "the docstring's tree and the module's classes differ"
    for name, cls in CLASSES.items():
        assert issubclass(cls, GraphexecError)
        parent = tree[name]
        if parent is None:
            assert cls is GraphexecError
        else:
            assert cls.__bases__ == (CLASSES[parent],), f"{name} is drawn under {parent}"


def test_every_warning_is_a_user_warning_named_in_the_docstring_and_public():
    """A warning is for the user (shown by default), not a failure: no GraphexecError."""
    assert WARNINGS
    for name, cls in WARNINGS.items():
        assert cls.__bases__ == (UserWarning,) and not issubclass(cls, GraphexecError), name
        assert name in errors.__doc__ and name in graphexec.__all__, name


def test_the_public_surface_is_pinned():
    assert sorted(graphexec.__all__) == sorted(
        [
            "DeviceError",
            "Engine",
            "EngineOptions",
            "ExecutionError",
            "ExportMismatchWarning",
            "GraphStructureError",
            "GraphexecError",
            "InputError",
            "InputShapeError",
            "LayerConfigError",
            "MissingExtraError",
            "ModelFormatError",
            "NonFiniteError",
            "OptionError",
            "RowError",
            "RunTimeoutError",
            "Trace",
            "UnsupportedOperatorError",
            "WeightError",
            "WorkerError",
            "__version__",
            "convert",
            "export",
        ]
    )
    for name in graphexec.__all__:
        assert hasattr(graphexec, name), name
    for name in CLASSES:  # every error is importable from the package
        assert getattr(graphexec, name) is CLASSES[name]


def test_model_format_error_says_where():
    assert str(ModelFormatError("bad", path="m.param", line=3)) == "m.param:3: bad"
    e = ModelFormatError("bad", path="m.bin")
    assert (str(e), e.path, e.line, e.reason) == ("m.bin: bad", "m.bin", None, "bad")
    assert str(ModelFormatError("bad")) == "<model>: bad"
    assert isinstance(WeightError("w"), ModelFormatError)


def test_unsupported_operator_error_lists_everything():
    e = UnsupportedOperatorError({"nn.B": ["b1"], "nn.A": [f"a{i}" for i in range(7)]})
    lines = str(e).splitlines()
    assert lines[0] == "2 unsupported operator type(s):"
    assert lines[1] == "  nn.A: used by a0, a1, a2, a3, a4, ... (7 in all)"
    assert lines[2] == "  nn.B: used by b1"
    assert e.unsupported["nn.A"] == [f"a{i}" for i in range(7)]  # all of them, though the message abbreviates


def test_layer_config_and_execution_errors_name_the_operator():
    e = LayerConfigError("conv1", "nn.Conv2d", "param groups=0 should be positive")
    assert str(e) == "operator conv1 (nn.Conv2d): param groups=0 should be positive"
    assert (e.op_name, e.op_type) == ("conv1", "nn.Conv2d")
    cause = ZeroDivisionError("division by zero")
    e = ExecutionError("div", "torch.div", ["(1,2)float32", "()float32"], cause)
    assert str(e) == (
        "while executing div (torch.div) on inputs [(1,2)float32, ()float32]: "
        "ZeroDivisionError: division by zero"
    )
    assert e.input_shapes == ["(1,2)float32", "()float32"]
    assert "on inputs [no inputs]: failed" in str(ExecutionError("c", "t", [], "failed"))


def test_every_error_survives_pickling():
    """Errors cross process pools: each must rebuild with the same message and fields."""
    import pickle

    samples = [
        ModelFormatError("bad", path="m.param", line=3),
        WeightError("short", path="m.bin"),
        UnsupportedOperatorError({"nn.A": ["a1", "a2"]}),
        LayerConfigError("conv1", "nn.Conv2d", "bad groups"),
        ExecutionError("div", "torch.div", ["(2)float32"], ZeroDivisionError("division by zero")),
        NonFiniteError("log", "F.log", ["(2)float32"], "output 0 holds NaN or Inf"),
        RowError(7, "rows/7.npy", "InputError: cannot read it"),
    ]
    made = {type(e) for e in samples}
    plain = [cls for cls in CLASSES.values() if cls not in made and cls.__init__ is GraphexecError.__init__]
    samples += [cls("message") for cls in plain]
    assert {type(e) for e in samples} == set(CLASSES.values())
    for error in samples:
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error)
        assert str(again) == str(error)
        assert vars(again) == vars(error)
