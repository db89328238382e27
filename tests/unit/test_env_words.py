"""`torchmark env` prints stored values in words, not as Python prints them."""

from __future__ import annotations


def test_env_says_values_in_words_not_as_python_prints_them() -> None:
    from torchmark.cli.machine import in_words

    assert in_words(None) == "none"  # was "None"
    assert in_words([2.1484375, 1.5, 0.25]) == "2.15, 1.5, 0.25"  # was "[2.1484375, ...]"
    assert in_words(False) == "no" and in_words(True) == "yes"
    assert in_words(33554432, "llc_bytes") == "32 MiB"
    assert in_words({"model": "EPYC", "max_mhz": None}) == "model EPYC; max_mhz none"
