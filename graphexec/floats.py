"""The floating-point state layers run in: IEEE results, as PyTorch gives them, no warnings."""

from __future__ import annotations

import numpy as np


def quiet_floats() -> np.errstate:
    """Overflow, division by zero and invalid operations give inf and NaN, as PyTorch gives
    them, without numpy's RuntimeWarnings: an extreme or damaged model's arithmetic is no
    error, and ``forward(..., check_finite=True)`` reports it where wanted. numpy keeps the
    setting per thread (a context variable), so whatever runs a layer sets it, on its own
    thread; a new one each time, as one errstate cannot be entered twice at once."""
    return np.errstate(all="ignore")
