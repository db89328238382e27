"""Measure (loop), stop (rules), summarise (Measurement)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchmark import _lazy_getattr

if TYPE_CHECKING:
    from torchmark.stats.measurement import Measurement, median_ci
    from torchmark.timing.loop import measure
    from torchmark.timing.stopping import RULES, Adaptive, Fixed, StoppingRule, preset

__all__ = [
    "RULES",
    "Adaptive",
    "Fixed",
    "Measurement",
    "StoppingRule",
    "measure",
    "median_ci",
    "preset",
]

# `measure` needs the devices, hence torch (~2 s): `from torchmark.stats.measurement import
# Measurement` (results, stored-run views) must not load it, so the package's names are
# looked up on first use.
_HOME = {
    "measure": "torchmark.timing.loop",
    "Measurement": "torchmark.stats.measurement",
    "median_ci": "torchmark.stats.measurement",
    "RULES": "torchmark.timing.stopping",
    "Adaptive": "torchmark.timing.stopping",
    "Fixed": "torchmark.timing.stopping",
    "StoppingRule": "torchmark.timing.stopping",
    "preset": "torchmark.timing.stopping",
}

__getattr__ = _lazy_getattr(__name__, _HOME)
