"""What the command-line tests share: the bundled models, one-line errors, quiet loggers."""

from __future__ import annotations

import sys

import pytest
from loguru import logger

from tests.paths import REPO

MODELS = REPO / "examples" / "models"
MODEL = MODELS / "inception_mini.pnnx.param"
#: A real pnnx export with an operator graphexec has no layer for (aten::i0).
UNSUPPORTED = MODELS / "bessel_gate.pnnx.param"


@pytest.fixture(autouse=True)
def loggers_quiet_again():
    """``--verbose`` adds a sink on the test's captured stderr and turns the library's loggers
    on; both are undone after each test, or every later test writes its debug lines to a
    closed stream (a "Logging error" each)."""
    yield
    logger.remove()
    logger.add(sys.__stderr__)
    for package in ("graphexec", "layers", "devices"):
        logger.disable(package)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("graphexec: error:"), err[0]
    return err[0]
