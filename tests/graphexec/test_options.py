"""Engine options: one typed, validated object; a bad value is an OptionError that names the
option, before any file is read."""

from __future__ import annotations

import dataclasses

import pytest

from graphexec import Engine, EngineOptions, GraphexecError, OptionError
from graphexec.passes import PASS_NAMES
from tests.paths import REPO

MODEL = REPO / "examples" / "models" / "inception_mini.pnnx.param"


@pytest.mark.parametrize("name, value", [
    ("threads", 0), ("threads", -2), ("threads", 1.5), ("threads", True), ("threads", "2"),
    ("intra_op_threads", 0), ("memory_limit", 0), ("memory_limit", -1),
    ("reuse_memory", "yes"), ("fallback", 1), ("pin_workers", None), ("share_nodes", "auto"),
    ("cpu_types", "nn.ReLU"), ("cpu_types", [1, 2]), ("passes_off", "merge_siblings"),
    ("cpu_kernels", "fast"), ("executor", 4), ("clock", 3.0),
])
def test_a_bad_value_names_its_option_before_the_file_is_read(name, value):
    with pytest.raises(OptionError, match=name):
        Engine.load(REPO / "no such model.pnnx.param", **{name: value})  # the option fails first


def test_an_option_error_is_a_graphexec_error():
    assert issubclass(OptionError, GraphexecError)


def test_an_unknown_option_lists_the_known_ones():
    with pytest.raises(OptionError, match="unknown engine option.*'thread'.*'threads'"):
        Engine.load(MODEL, thread=2)


def test_an_unknown_pass_lists_the_passes():
    with pytest.raises(OptionError, match="fuse_activation.*" + PASS_NAMES[0]):
        Engine.load(MODEL, passes_off={"fuse_activation"})


def test_options_are_frozen_and_carried_whole():
    options = EngineOptions(threads=2, passes_off={"merge_siblings"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.threads = 3  # type: ignore[misc]
    assert options.passes_off == frozenset({"merge_siblings"})
    engine = Engine.load(MODEL, options=options)
    assert engine.threads == 2 and engine.options is not options and engine.options == options
    assert Engine.load(MODEL, options=options, threads=1).threads == 1  # a keyword replaces a field


def test_the_older_switches_turn_their_passes_off():
    options = EngineOptions.from_keywords(merge_convs=False, fold_preactivations=False, fuse_excitations=True)
    assert options.passes_off == {"merge_siblings", "fold_preactivations"}
    with pytest.raises(OptionError, match="merge_convs must be True or False"):
        EngineOptions.from_keywords(merge_convs="no")


def test_cpu_kernels_choose_the_tiers(monkeypatch):
    from graphexec.devices.cpu import jit

    assert EngineOptions(cpu_kernels="reference").kernel_tiers() == ()
    assert EngineOptions(cpu_kernels="numpy").kernel_tiers() == ("numpy",)
    monkeypatch.setenv("GRAPHEXEC_CPU_KERNELS", "numpy")
    assert EngineOptions().kernel_tiers() == ("numpy",)
    monkeypatch.setenv("GRAPHEXEC_CPU_KERNELS", "bogus")
    with pytest.raises(OptionError, match="GRAPHEXEC_CPU_KERNELS"):
        EngineOptions().kernel_tiers()
    monkeypatch.delenv("GRAPHEXEC_CPU_KERNELS")
    monkeypatch.setattr(jit, "available", lambda: False)
    assert EngineOptions().kernel_tiers() == ("numpy",)
    with pytest.raises(OptionError, match=r"graphexec\[jit\]"):
        EngineOptions(cpu_kernels="jit").kernel_tiers()
