"""`torchmark env` prints stored values in words, not as Python prints them."""

from __future__ import annotations


def test_env_says_values_in_words_not_as_python_prints_them() -> None:
    from torchmark.cli.machine import in_words

    assert in_words(None) == "none"  # was "None"
    assert in_words([2.1484375, 1.5, 0.25]) == "2.15, 1.5, 0.25"  # was "[2.1484375, ...]"
    assert in_words(False) == "no" and in_words(True) == "yes"
    assert in_words(33554432, "llc_bytes") == "32 MiB"
    assert in_words({"model": "EPYC", "max_mhz": None}) == "model EPYC; max_mhz none"


def test_list_names_no_seed_a_user_never_saw() -> None:
    # `list` said "Seed 02's MLP": the project's own reading notes, not the user's words
    from torchmark.workloads import WORKLOADS, load_builtins

    load_builtins()
    said = [WORKLOADS.get(name).summary for name in WORKLOADS.names()]
    assert said and not [s for s in said if "Seed 0" in s]
