"""``graphexec graph``: the graph as exported by default, the plan with ``--plan``; SVG laid
out by graphexec, DOT for Graphviz, PNG through Graphviz's ``dot``."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import pytest

from graphexec import Engine, draw, pnnx
from graphexec.cli import main
from tests.graphexec.cli_support import MODEL, UNSUPPORTED, loggers_quiet_again, one_error_line  # noqa: F401

SVG = {"svg": "http://www.w3.org/2000/svg"}


def boxes(path) -> list[ET.Element]:
    return ET.fromstring(path.read_text()).findall(".//svg:g/svg:rect", SVG)


def test_graph_draws_the_exported_graph_by_default(tmp_path, capsys):
    path = tmp_path / "graph.svg"
    assert main(["graph", str(MODEL), "-o", str(path)]) == 0
    graph = pnnx.load(MODEL)
    drawn = boxes(path)
    assert len(drawn) == len(graph.operators) == 57  # every operator as exported, input and output included
    titles = [t.text for t in ET.fromstring(path.read_text()).findall(".//svg:g/svg:title", SVG)]
    assert sum(t.startswith("nn.ReLU:") for t in titles) == 22  # not fused into their convolutions
    assert {b.get("fill") for b in drawn} >= {draw.pastel("nn.Conv2d"), draw.pastel("nn.ReLU")}
    assert not any(b.get("stroke") == draw.CRITICAL_COLOUR for b in drawn)
    assert "57 operators as exported" in capsys.readouterr().out


def test_graph_draws_a_model_it_cannot_run(tmp_path):
    path = tmp_path / "graph.svg"
    assert main(["graph", str(UNSUPPORTED), "-o", str(path)]) == 0  # drawing needs no layers
    assert any(t.text.startswith("aten::i0") for t in ET.fromstring(path.read_text()).iter(f"{{{SVG['svg']}}}title"))


def test_graph_plan_draws_every_node_and_the_critical_path(tmp_path, capsys):
    path = tmp_path / "graph.svg"
    assert main(["graph", str(MODEL), "--plan", "-o", str(path)]) == 0
    drawn = boxes(path)
    plan = Engine.load(MODEL).plan()
    # 55 operators, 22 activations fused into their producers, each block's three 1x1
    # siblings one node with a view per sibling (graphexec.siblings)
    assert len(plan.nodes) == 55 - 22 - 3 * 2 + 3 * 3
    assert len(drawn) == len(plan.nodes) + 2  # the plan's nodes, the input and the output
    critical = [b for b in drawn if b.get("stroke") == draw.CRITICAL_COLOUR]
    assert len(critical) == len(plan.critical_path) == 19
    assert {b.get("fill") for b in drawn} == {draw.device_colour("cpu"), draw.BOUNDARY_COLOUR}


def test_graph_plan_takes_the_input_shape(tmp_path, capsys):
    path = tmp_path / "graph.dot"
    assert main(["graph", str(MODEL), "--plan", "--input-shape", "2,3,64,64", "-o", str(path)]) == 0
    assert '"out0\\n2x10"' in path.read_text()


def test_graph_dot_has_every_node_and_edge(tmp_path, capsys):
    path = tmp_path / "graph.dot"
    assert main(["graph", str(MODEL), "--plan", "-o", str(path)]) == 0
    text = path.read_text()
    assert text.startswith('digraph "inception_mini" {') and text.rstrip().endswith("}")
    assert sum(" [label=" in line for line in text.splitlines()) == 36 + 2
    assert text.count("penwidth=2.5];") == 19 + 18 + 2  # critical nodes, edges between them, in and out
    assert "dot -Tsvg" in capsys.readouterr().out
    assert main(["graph", str(MODEL), "-o", str(path)]) == 0
    exported = path.read_text()
    assert sum(" [label=" in line for line in exported.splitlines()) == 57
    assert exported.count(" -> ") == sum(len(o.consumers) for o in pnnx.load(MODEL).operands.values())


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graph_png_through_graphviz(tmp_path, capsys):
    path = tmp_path / "graph.png"
    assert main(["graph", str(MODEL), "-o", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_graph_png_without_graphviz_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    assert main(["graph", str(MODEL), "-o", str(tmp_path / "graph.png")]) == 1
    line = one_error_line(capsys)
    assert "writing PNG needs Graphviz's dot program" in line and "or write .svg" in line


def test_graph_refuses_other_formats(tmp_path, capsys):
    assert main(["graph", str(MODEL), "-o", str(tmp_path / "graph.pdf")]) == 1
    assert "must end in .svg, .dot or .png" in one_error_line(capsys)


def test_graph_colour_follows_the_device():
    assert draw.device_colour("cpu") == draw.DEVICE_COLOURS["cpu"]
    assert draw.device_colour("opencl") != draw.device_colour("cpu")
    assert draw.device_colour("npu").startswith("#") and draw.device_colour("npu") == draw.device_colour("npu")

    class Placed:
        device = "opencl"

    assert draw.node_device(Placed()) == "opencl" and draw.node_device(object()) == "cpu"
