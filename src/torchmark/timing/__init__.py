"""Measure (loop), stop (rules), summarise (Measurement)."""

from torchmark.timing.loop import measure
from torchmark.timing.stats import Measurement, median_ci
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
