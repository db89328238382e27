"""Doctor checks as pure functions of made-up facts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from torchmark.doctor import (
    Check,
    check_clocks_power,
    check_devices,
    check_driver,
    check_ecc_mig,
    check_governor,
    check_gpu_processes,
    check_load,
    check_pcie,
    check_persistence,
    check_threads,
    check_tiny_ops,
    check_torch_build,
    exit_code,
    run_checks,
    wheel_for,
)

GIB = 1024**3

GPU = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-1",
    "persistence": True,
    "sm_mhz": 345,
    "max_sm_mhz": 1980,
    "power_limit_w": 700.0,
    "default_power_limit_w": 700.0,
    "temp_c": 31,
    "reasons": ["GPU idle"],
    "pcie_gen": 5,
    "pcie_gen_max": 5,
    "pcie_width": 16,
    "pcie_width_max": 16,
    "ecc": [True, True],
    "mig": [False, False],
    "memory_total": 80 * GIB,
    "memory_used": 1 * GIB,
    "processes": [],
}


def facts(**changes: Any) -> dict[str, Any]:
    """A healthy machine with one H100 and a CUDA 12.8 build; ``a__b=v`` sets f[a][b]."""
    f: dict[str, Any] = {
        "torch": {
            "version": "2.13.0+cu128",
            "cuda": "12.8",
            "hip": None,
            "cuda_available": True,
            "cuda_device_count": 1,
            "cuda_init_error": None,
            "cudnn": 91000,
            "cudnn_available": True,
            "mps_available": False,
        },
        "nvml": {
            "ok": True,
            "driver": "570.86",
            "cuda_driver": [12, 8],
            "gpus": [copy.deepcopy(GPU)],
            "pcie_under_load": True,
        },
        "nvidia_gpus_seen": 1,
        "env": {},
        "devices": [
            {"device": "cpu", "label": "EPYC (16 cores)", "max_rel_err": 0.0},
            {"device": "cuda:0", "label": "H100", "max_rel_err": 3e-4},
        ],
        "threads": {
            "torch": 16,
            "interop": 16,
            "logical_cores": 32,
            "physical_cores": 16,
            "affinity": 32,
        },
        "precision": {
            "float32_matmul_precision": "highest",
            "cuda_matmul_allow_tf32": False,
            "cudnn_allow_tf32": True,
        },
        "cpufreq": {"governors": ["performance"], "boost": "1", "no_turbo": None},
        "memory": {"total": 256 * GIB, "available": 200 * GIB},
        "load": {"busy_cores": 0.1, "other_cores": 0.1, "loadavg": [0.1, 0.1, 0.1], "top": []},
        "pid": 4242,
    }
    for key, value in changes.items():
        *path, last = key.split("__")
        node = f
        for p in path:
            node = node[p] if not p.isdigit() else node[int(p)]
        node[last] = value
    return f


def cpu_build(**changes: Any) -> dict[str, Any]:
    return facts(
        torch__version="2.13.0+cpu",
        torch__cuda=None,
        torch__cuda_available=False,
        torch__cuda_device_count=0,
        torch__cudnn=None,
        **changes,
    )


def test_healthy_machine_passes_every_check() -> None:
    checks = run_checks(facts())
    assert [c for c in checks if c.status not in ("ok", "skip")] == []
    assert exit_code(checks) == 0


def test_cpu_build_on_a_gpu_machine_fails_with_the_right_wheel() -> None:
    [c] = check_torch_build(cpu_build())
    assert c == Check(
        "torch build",
        "fail",
        "torch 2.13.0+cpu is a CPU-only build, but this machine has 1 NVIDIA GPU(s)",
        "pip install torch --index-url https://download.pytorch.org/whl/cu128",
    )
    assert exit_code(run_checks(cpu_build())) == 1


@pytest.mark.parametrize(
    ("driver", "tag"),
    [
        ([12, 4], "cu124"),
        ([12, 7], "cu126"),
        ([13, 1], "cu130"),
        ([11, 4], "cu118"),
        (None, "cu128"),
    ],
)
def test_wheel_for_driver(driver: list[int] | None, tag: str) -> None:
    assert (
        wheel_for(driver) == f"pip install torch --index-url https://download.pytorch.org/whl/{tag}"
    )


def test_cpu_build_without_gpu_is_fine() -> None:
    f = cpu_build(
        nvidia_gpus_seen=0, nvml={"ok": False, "error": "NVML Shared Library Not Found", "gpus": []}
    )
    assert check_torch_build(f)[0].status == "ok"
    assert check_persistence(f) == [
        Check("persistence mode", "skip", "no NVML (NVML Shared Library Not Found)")
    ]
    assert exit_code(run_checks(f)) == 0


def test_cuda_build_without_usable_gpu() -> None:
    f = facts(
        torch__cuda_available=False,
        torch__cuda_init_error="CUDA driver version is insufficient for CUDA runtime version",
    )
    [c] = check_torch_build(f)
    assert c.status == "fail"
    assert c.detail.endswith(
        "but no usable GPU (CUDA driver version is insufficient for CUDA runtime version)"
    )
    nogpu = facts(torch__cuda_available=False, nvidia_gpus_seen=0)
    assert check_torch_build(nogpu)[0].status == "warn"


def test_driver_older_than_runtime() -> None:
    assert check_driver(facts(nvml__cuda_driver=[11, 8]))[0].status == "fail"
    c = check_driver(facts(nvml__cuda_driver=[12, 4]))[0]
    assert c.status == "warn" and "PTX JIT" in c.detail
    assert c.fix == (
        "update the NVIDIA driver or pip install torch --index-url "
        "https://download.pytorch.org/whl/cu124"
    )
    assert check_driver(cpu_build())[0].status == "skip"


def test_hidden_gpus_and_failed_tiny_op() -> None:
    f = facts(torch__cuda_device_count=1, env={"CUDA_VISIBLE_DEVICES": "0"})
    f["nvml"]["gpus"].append(dict(GPU, index=1))
    c = check_devices(f)[0]
    assert c.status == "warn" and "torch sees 1 of 2 GPUs (CUDA_VISIBLE_DEVICES=0)" in c.detail
    f = facts()
    f["devices"][1] = {"device": "cuda:0", "label": "H100", "error": "RuntimeError: no kernel"}
    f["devices"][0]["max_rel_err"] = 0.5
    assert [c.status for c in check_tiny_ops(f)] == ["fail", "fail"]


def test_threads_oversubscribed_and_underused() -> None:
    c = check_threads(facts(threads__torch=64, env={"OMP_NUM_THREADS": "64"}))[0]
    assert c.status == "warn"
    assert c.detail == (
        "torch uses 64 threads on 32 usable cores (16 physical) "
        "(OMP_NUM_THREADS=64): oversubscribed, threads wait on each other"
    )
    assert c.fix == "export OMP_NUM_THREADS=16 or torchmark run --threads 16"
    assert check_threads(facts(threads__torch=1))[0].status == "warn"


def test_governor_and_boost() -> None:
    checks = check_governor(
        facts(cpufreq={"governors": ["powersave"], "boost": "0", "no_turbo": None})
    )
    assert [c.status for c in checks] == ["warn", "warn"]
    assert checks[0].fix == "sudo cpupower frequency-set -g performance"
    unread = check_governor(facts(cpufreq={"governors": None, "boost": None, "no_turbo": None}))
    assert [c.status for c in unread] == ["skip", "skip"]


def test_gpu_state_checks() -> None:
    assert check_persistence(facts(nvml__gpus__0__persistence=False))[0].fix == (
        "sudo nvidia-smi -pm 1"
    )
    c = check_clocks_power(facts(nvml__gpus__0__power_limit_w=450.0))[0]
    assert c.status == "warn" and c.fix == "sudo nvidia-smi -i 0 -pl 700"
    hot = check_clocks_power(facts(nvml__gpus__0__reasons=["HW thermal slowdown"]))[0]
    assert hot.status == "warn" and "slowed while idle: HW thermal slowdown" in hot.detail
    assert check_ecc_mig(facts(nvml__gpus__0__mig=[True, True]))[0].status == "warn"
    assert check_ecc_mig(facts(nvml__gpus__0__ecc=[True, False]))[0].status == "warn"


def test_pcie_width_and_generation() -> None:
    c = check_pcie(facts(nvml__gpus__0__pcie_width=4))[0]
    assert c.status == "warn" and c.detail.startswith("gen5 x4 (max gen5 x16): fewer lanes")
    assert "transfers run at 25 %" in c.detail
    assert check_pcie(facts(nvml__gpus__0__pcie_gen=1))[0].status == "warn"  # under load
    idle = check_pcie(facts(nvml__gpus__0__pcie_gen=1, nvml__pcie_under_load=False))[0]
    assert idle.status == "ok" and "at idle" in idle.detail
    assert check_pcie(facts(nvml__gpus__0__pcie_gen=None))[0].status == "skip"


def test_other_processes_and_load() -> None:
    procs = [{"pid": 4242, "used_bytes": GIB}, {"pid": 77, "used_bytes": 12 * GIB}]
    c = check_gpu_processes(facts(nvml__gpus__0__processes=procs))[0]
    assert c == Check(
        "other processes gpu0",
        "warn",
        "1 other process(es) use 12.0 GiB (pid 77)",
        "stop them: they share the GPU's time, memory and power",
    )
    busy = facts(
        load={
            "busy_cores": 3.0,
            "other_cores": 2.5,
            "loadavg": [3, 2, 1],
            "top": [{"pid": 9, "name": "make", "cpu_pct": 180}],
        }
    )
    c = check_load(busy)[0]
    assert (
        c.status == "warn"
        and c.detail
        == "other processes use 2.5 of 32 cores now; 1-minute load 3.00: make (9) 180 %"
    )


def test_the_package_keeps_the_names_the_module_had() -> None:
    # doctor.py became a package; cli/doctor.py and these tests import these names
    import torchmark.doctor as doctor

    checks = [n for n in doctor.__all__ if n.startswith("check_")]
    assert len(checks) == len(doctor.CHECKS) == 15
    assert {c.__name__ for c in doctor.CHECKS} == set(checks)
    for n in ("Check", "gather", "run_checks", "exit_code", "wheel_for", "CUDA_WHEELS", "GIB"):
        assert hasattr(doctor, n), n
