"""The host's facts without torch: /proc/cpuinfo read as py-cpuinfo names it, the build probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchmark.devices import host

PROC = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx avx2 fma avx512f amx_tile

processor\t: 1
model name\t: another
"""


def test_proc_cpuinfo_gives_the_brand_and_flags() -> None:
    facts = host._from_proc(PROC)
    assert facts == {
        "brand_raw": "Intel(R) Xeon(R) Processor",
        "flags": ["fpu", "avx", "avx2", "fma", "avx512f", "amx_tile"],
    }
    assert host._from_proc("processor\t: 0\nFeatures\t: fp asimd\n") is None  # ARM: cpuinfo


@pytest.mark.parametrize(
    ("lines", "driver", "host_only"),
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\nxpu: Optional[str] = None",
         True, True),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None", True, False),
        # PyPI's default CUDA build on a machine with no NVIDIA driver: CUDA cannot run there
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None", False, True),
        ("cuda = None\nhip = '6.2.41133'", False, False),
        ("cuda = '12.8'\nxpu = '2025.1'", False, False),
        ("__version__ = '2.13.0'", False, False),  # says nothing of cuda: ask torch
    ],
)  # fmt: skip
def test_a_cpu_only_build_is_told_from_its_version_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: str, driver: bool, host_only: bool
) -> None:
    (tmp_path / "version.py").write_text(lines + "\n")
    signs = set(host.NVIDIA_SIGNS) if driver else set()
    monkeypatch.setattr(host.os.path, "exists", lambda p: p in signs)

    class Spec:
        origin = str(tmp_path / "__init__.py")

    monkeypatch.setattr(host.importlib.util, "find_spec", lambda name: Spec())
    monkeypatch.setattr(host.sys, "platform", "linux")
    assert host.torch_sees_only_the_host() is host_only
