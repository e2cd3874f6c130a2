"""The docs stay true: the operator table matches the registry, the README links to it and
covers every command, and the pictures it shows are there."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from graphexec.cli import build_parser
from tests.paths import REPO
from tools import operator_table

ROOT = REPO
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_operator_table_is_current():
    current = (ROOT / "docs" / "operators.md").read_text(encoding="utf-8")
    assert current == operator_table.render(), "docs/operators.md is out of date: run python tools/operator_table.py"


def test_the_operator_table_lists_every_builtin_type_once():
    from graphexec import layers

    listed = [
        name.strip().strip("`")
        for line in operator_table.render().splitlines() if line.startswith("| `")
        for name in line.split("|")[1].split(",")
    ]
    builtin = [t for t in layers.registered_types() if layers.lookup(t).__module__.startswith("graphexec.layers.")]
    assert sorted(listed) == sorted(builtin)


def test_readme_links_the_operator_table_and_the_pictures():
    for target in ("docs/operators.md", "docs/googlenet_graph.svg", "docs/googlenet_schedule.png"):
        assert f"]({target})" in README, target
        assert (ROOT / target).is_file(), target


def test_readme_shows_every_command_and_the_export_helper():
    commands = build_parser()._subparsers._group_actions[0].choices
    for command in commands:
        assert f"graphexec {command} " in README, command
    assert "graphexec.export(" in README


def test_the_pictures_are_real_files():
    root = ET.parse(ROOT / "docs" / "googlenet_graph.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall(".//{http://www.w3.org/2000/svg}g")) >= 82  # GoogLeNet: 82 nodes once ReLUs are fused
    assert (ROOT / "docs" / "googlenet_schedule.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
