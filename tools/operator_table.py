"""Write docs/operators.md: every pnnx operator type graphexec runs, from the layer registry,
grouped by the module of ``layers/`` that computes it, with each class's docstring's first
line (its first paragraph, when the sentence runs on). tests/test_docs.py fails when the
file is out of date::

    python tools/operator_table.py          # rewrite docs/operators.md
    python tools/operator_table.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import inspect
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from graphexec import layers

TARGET = ROOT / "docs" / "operators.md"


def _first_line(obj: object) -> str:
    """The docstring's summary: its first line, with the lines that continue its sentence."""
    doc = inspect.cleandoc(obj.__doc__ or "").strip()  # its own (getdoc would inherit Layer's)
    paragraph = doc.split("\n\n")[0].splitlines() if doc else []
    return " ".join(line.strip() for line in paragraph)


def _summary(cls: type) -> str:
    """The first docstring line of ``cls`` or, if it has none, of its nearest layer base."""
    for klass in cls.__mro__:
        if klass is layers.Layer or klass is object:
            break
        if _first_line(klass):
            return _first_line(klass)
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The Markdown table of the built-in layers (those defined under ``layers.``)."""
    by_class: dict[type, list[str]] = defaultdict(list)
    for op_type in layers.registered_types():
        cls = layers.lookup(op_type)
        if cls is not None and cls.__module__.startswith("graphexec.layers."):
            by_class[cls].append(op_type)
    by_module: dict[str, list[type]] = defaultdict(list)
    for cls in by_class:
        by_module[cls.__module__].append(cls)
    count = sum(len(types) for types in by_class.values())
    lines = [
        "# Supported operators",
        "",
        (f"graphexec runs {count} pnnx operator types with {len(by_class)} layer classes in "
         f"{len(by_module)} modules of `layers/`. A model using any other type fails at load with an "
         "`UnsupportedOperatorError` listing every missing type (`graphexec info MODEL` lists them "
         "too); adding one is a class and a `@register` line (see [Adding an operator](guide/adding-an-operator.md))."),
        "",
        "Generated from the layer registry by `python tools/operator_table.py`; do not edit by hand.",
    ]
    for module in sorted(by_module):
        lines += ["", f"## `{module}`", ""]
        summary = _first_line(sys.modules[module])
        if summary:
            lines += [_cell(summary), ""]
        lines += ["| pnnx type | layer | what it computes |", "|---|---|---|"]
        for cls in sorted(by_module[module], key=lambda c: min(by_class[c])):
            types = ", ".join(f"`{t}`" for t in sorted(by_class[cls]))
            lines.append(f"| {types} | `{cls.__name__}` | {_cell(_summary(cls))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is out of date: run python tools/operator_table.py")
            return 1
        print(f"{TARGET} is up to date")
        return 0
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
