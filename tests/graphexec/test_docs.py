"""The docs stay true: the operator table matches the registry; the README stays short,
shows every command, runs the test command CI runs, and every link in it and in docs/
leads somewhere; mkdocs lists every page; the pictures are real files."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

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
    assert "graphexec.export(" in README and "graphexec.convert(" in README


def test_the_readme_is_a_ten_minute_read():
    assert len(README.splitlines()) <= 300
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings == ["## Install, and two commands", "## A ten-minute tour", "## Benchmarks",
                        "## Adding an operator", "## Layout"]


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```sh\n(.+?)\n```", README)
    tests = [c for c in commands if "pytest" in c]
    assert len(tests) == 1, commands
    assert tests[0] in (ROOT / ".ci" / "run").read_text(), "the README's test command and .ci/run differ"
    assert any("examples/inception.py" in c for c in commands)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(path.read_text(encoding="utf-8")) if "://" not in t and not t.startswith("mailto:")]


def test_every_link_in_the_readme_and_the_docs_leads_somewhere():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = [f"{page.relative_to(ROOT)} -> {target}" for page in pages for target in _relative_links(page)
              if not (page.parent / target).exists()]
    assert broken == []


def test_mkdocs_lists_every_page():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert nav == pages


def test_the_pictures_are_real_files():
    root = ET.parse(ROOT / "docs" / "googlenet_graph.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall(".//{http://www.w3.org/2000/svg}g")) >= 82  # GoogLeNet: 82 nodes once ReLUs are fused
    assert (ROOT / "docs" / "googlenet_schedule.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
