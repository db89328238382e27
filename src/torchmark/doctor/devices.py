"""Device checks: every device torch sees, and a tiny op on each against the CPU."""

from __future__ import annotations

from torchmark.doctor.base import Check, Facts


def check_devices(f: Facts) -> list[Check]:
    names = [d["device"] for d in f["devices"]]
    torch_gpus, nvml_gpus = f["torch"]["cuda_device_count"], len(f["nvml"]["gpus"])
    detail = "visible: " + ", ".join(f"{d['device']} ({d['label']})" for d in f["devices"])
    if torch_gpus and nvml_gpus > torch_gpus:
        vis = f["env"].get("CUDA_VISIBLE_DEVICES", "unset")
        return [
            Check(
                "devices",
                "warn",
                f"{detail}; torch sees {torch_gpus} of {nvml_gpus} GPUs "
                f"(CUDA_VISIBLE_DEVICES={vis})",
                "unset CUDA_VISIBLE_DEVICES to measure every GPU",
            )
        ]
    return [Check("devices", "ok" if names else "fail", detail if names else "no device found")]


def check_tiny_ops(f: Facts) -> list[Check]:
    out = []
    for d in f["devices"]:
        name = f"tiny op on {d['device']}"
        if "error" in d:
            out.append(
                Check(
                    name,
                    "fail",
                    f"64x64 matmul + add failed: {d['error']}",
                    "reinstall torch for this device; run `torchmark env`",
                )
            )
            continue
        err = d["max_rel_err"]
        # TF32 or a different summation order moves a 64-term fp32 dot product by ~1e-3.
        if err > 1e-2:
            out.append(
                Check(
                    name,
                    "fail",
                    f"result differs from the CPU by {err:.1e} (relative)",
                    "the device computes wrong results: check driver and hardware",
                )
            )
        else:
            out.append(Check(name, "ok", f"matches the CPU (max relative error {err:.1e})"))
    return out
