"""``input``: is the training step starving for data? A JPEG dataset decoded and augmented
by a DataLoader feeds a training step; the sweep turns the DataLoader's knobs and one case
feeds the same step from a batch already on the device (the ceiling the pipeline is
measured against). Each step's wait / copy / compute is kept (``feed.FedEpoch``); the advice
(best configuration, gain, where workers stop helping) is ``advice.advise`` over the results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import platformdirs
import torch
import torch.nn.functional as F
from torch import nn

from torchmark import format as fmt
from torchmark.devices.base import Device
from torchmark.devices.host import available_cores
from torchmark.errors import CaseSkipped, WrongResultError
from torchmark.loaders import LOADER, RESIDENT, LoaderConfig, config_of, params
from torchmark.results import Work
from torchmark.stats.measurement import Measurement
from torchmark.timing.stopping import preset
from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload, trimmed
from torchmark.workloads.pipeline.feed import Batch, FedEpoch, first_batches, make_loader
from torchmark.workloads.pipeline.images import JpegImages, ensure_images
from torchmark.workloads.pipeline.tokens import TokenShards, ensure_tokens

CHECK_BATCHES = 2  # batches compared with the default configuration's before timing


@dataclass(frozen=True)
class Shape:
    """The dataset and step of one device class."""

    images: int
    side: int  # mean source image side, px (ImageNet's is ~400)
    crop: int  # network input side
    batch: int
    classes: int


# CPU: 2 cores must finish the sweep in about a minute; decode (~1 ms per 160 px JPEG here)
# is of the order of the small CNN's step, the regime where the loader settings matter.
CPU_SHAPE = Shape(images=256, side=160, crop=64, batch=16, classes=10)
# GPU: ImageNet-like images into resnet50, the reference input-bound training loop. 512
# images: the slowest configuration (workers=0, 259 images/s on a 16-core H100 VM) takes
# 2 s an epoch, so its case ends in ~20 s; 2048 took 8 s an epoch and the 11-case sweep
# did not end in 90 s.
GPU_SHAPE = Shape(images=512, side=400, crop=224, batch=64, classes=1000)


class SmallCNN(nn.Module):
    """Three strided conv blocks and a linear head: ~0.1 GFLOP per 64 px image trained."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c_out in (32, 64, 128):
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def worker_counts(cores: int, quick: bool) -> list[int]:
    """0, 1, 2, 4, ... up to the cores this process may use (and that count itself):
    past it workers only compete with the training step for the same cores."""
    if quick:
        return sorted({0, min(2, cores)})
    out = [0] + [1 << i for i in range(cores.bit_length()) if 1 << i <= cores]
    return sorted({*out, cores})


def bounded(configs: list[LoaderConfig]) -> list[LoaderConfig]:
    """The standard suite's sweep on a GPU: DataLoader's defaults (no workers) against the
    usual best (the most workers, pinned, non-blocking copies), beside the resident step;
    ``extended`` sweeps the rest (each case is epochs of JPEG decoding: on the H200's host 13
    cases took over 200 s each, more than the GPU suite's 8 minutes)."""
    top = max(c.workers for c in configs)
    best = LoaderConfig(top, pin=True, non_blocking=True)
    return [c for c in configs if c in (LoaderConfig(), best)]


@WORKLOADS.register("input")
class InputPipeline(Workload):
    name: ClassVar[str] = "input"
    summary: ClassVar[str] = (
        "DataLoader sweep feeding a training step from JPEGs: wait / copy / compute per step, "
        "vs the same step fed from device memory"
    )
    group: ClassVar[str] = "model"
    unit: ClassVar[str] = "images"
    shapes: ClassVar[dict[bool, Shape]] = {False: CPU_SHAPE, True: GPU_SHAPE}  # accelerator?
    loading: ClassVar[str] = (
        "JPEG decode, random resized crop, flip and normalise in Dataset.__getitem__"
    )
    # One batch's wait on a worker past this is a hung worker: below the watchdog's 10 s
    # call bound, so the reason named is the loader's.
    batch_timeout_s: ClassVar[float] = 8.0

    def __init__(self, fixed: Shape | None = None) -> None:
        self.fixed = fixed  # benchmarks: one shape on every device
        self.cache_dir: Path | None = None
        self.dataset_factory: Callable[[Shape, Path], Any] | None = None  # tests: faulty sets

    def shape(self, device: Device) -> Shape:
        return self.fixed or self.shapes[device.is_accelerator]

    @staticmethod
    def data_words(count: int, shape: Shape) -> str:
        return f"{count} JPEGs of ~{shape.side} px"

    # planned in the standard suite on a GPU (``trimmed``); else only from ``extended`` on
    in_trimmed: ClassVar[bool] = True

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        self.cache_dir = Path(opts.cache_dir) if opts.cache_dir else None
        if trimmed(opts.suite, device) and not self.in_trimmed:
            return []
        rule = "quick" if opts.suite == "quick" else "epoch"
        shape = self.shape(device)
        batches = opts.batches or (shape.batch,)
        configs = self._configs(worker_counts(available_cores(), opts.suite == "quick"))
        if trimmed(opts.suite, device):
            configs = bounded(configs)
        out = []
        # --size N: N images (named in the case only when asked, to keep labels short)
        counts: list[tuple[tuple[str, int], ...]] = [(("images", n),) for n in opts.sizes] or [()]
        for n in counts:
            for b in batches:
                sweep = f"{self.name}/{device.name}/b={b}/{n}"
                out.append(Case(self.name, RESIDENT, device, (("batch", b), *n), sweep, rule))
                out += [
                    Case(self.name, LOADER, device, (*params(c, b), *n), sweep, rule)
                    for c in configs
                ]
        return out

    def _configs(self, top: list[int]) -> list[LoaderConfig]:
        configs = [LoaderConfig(workers=w) for w in top]
        w = top[-1]
        if w:
            configs += [LoaderConfig(w, persistent=True), LoaderConfig(w, prefetch=4)]
        # how the batch reaches the device: planned everywhere, skipped with the reason
        # where there is no CUDA (the CPU's batch is already in its memory)
        return [
            *configs,
            LoaderConfig(w, pin=True),
            LoaderConfig(w, pin=True, non_blocking=True),
            LoaderConfig(w, non_blocking=True),  # pageable: the tutorial's slow case
            LoaderConfig(w, pin=True, non_blocking=True, side_stream=True),
        ]

    @classmethod
    def plan_note(cls, cases: Sequence[Case]) -> list[str]:
        """Per device: the cases, the data one call reads and how long a case measures: its
        rule ends the warm-up and then the samples at ``max_time_s`` each, or after one
        call where a call (an epoch) is longer."""
        out = []
        for device in dict.fromkeys(c.device for c in cases):
            mine = [c for c in cases if c.device == device]
            p = mine[-1].param_dict
            shape = cls.shapes[device.is_accelerator]
            images, batch = int(p.get("images", shape.images)), int(p["batch"])
            rule_s = preset(mine[-1].rule or "epoch").max_time_s
            out.append(
                f"{cls.name} on {device.name}: {fmt.plural(len(mine), 'case')}; a call is an "
                f"epoch of {cls.data_words(images, shape)} ({images // batch} batches of {batch}, "
                f"written once to the cache dir); each case: its check and first epoch, then "
                f"warm-up and samples for ~{rule_s:.0f} s each (at least one epoch each)"
            )
        return out

    def prepare(self, case: Case) -> Prepared:
        device, p = case.device, case.param_dict
        shape = self.shape(device)
        shape = replace(shape, batch=int(p["batch"]), images=int(p.get("images", shape.images)))
        model, opt = self._model(shape, device)
        rule = case.rule or "epoch"

        def train(batch: Batch) -> torch.Tensor:
            x, y = batch
            loss = self._loss(model, x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        work = Work(items=shape.batch * self.per_sample(shape), item_unit=self.unit)
        extra: dict[str, Any] = {"crop": shape.crop, "model": type(model).__name__}
        if case.variant == RESIDENT:
            x, y = self._resident_batch(shape, torch.Generator().manual_seed(1))
            xd, yd = x.to(device.torch_device), y.to(device.torch_device)
            note = "resident: the same step fed one batch already in device memory (the ceiling)"

            def resident() -> object:
                out = train((xd, yd))
                device.synchronize()  # as the fed step does: the two differ only in feeding
                return out

            return Prepared(fn=resident, work=work, timing="e2e", rule=rule, notes=[note])
        cfg = config_of(p)
        if cfg.copies_async and (why := device.supports_async_copy()) is not None:
            raise CaseSkipped(why)
        dataset = self._dataset(shape)
        extra |= {"items": len(dataset), "item_side": shape.side, "loader": cfg.label()}

        def loader(c: LoaderConfig) -> Any:
            return make_loader(dataset, shape.batch, c, self.batch_timeout_s)

        epoch = FedEpoch(
            loader(cfg), train, device, non_blocking=cfg.non_blocking, side_stream=cfg.side_stream
        )

        def check() -> list[str]:
            # through the case's own copy path: a side stream read too early is wrong
            got = epoch.copied(first_batches(loader(cfg), CHECK_BATCHES))
            if cfg.is_default:
                return []
            want = first_batches(loader(LoaderConfig()), CHECK_BATCHES)
            same_batches(got, want, cfg)
            return []

        def summarize(m: Measurement) -> dict[str, Any]:
            # the timed epochs only: the first call and the warm-up are set aside, as the
            # headline sets them aside
            return {"input": epoch.breakdown(skip_epochs=1 + m.warmup_calls)}

        steps = len(dataset) // shape.batch
        if steps < CHECK_BATCHES:
            raise CaseSkipped(
                f"{len(dataset)} samples make {steps} batches of {shape.batch}: the check needs "
                f"{CHECK_BATCHES}; pass --size {CHECK_BATCHES * shape.batch} or more"
            )
        extra["steps_per_epoch"] = steps
        notes = [
            f"loader: one call is one epoch; {self.loading}",
            f"workers are swept no higher than the {available_cores()} cores this process may "
            "use: past them workers compete with the step for the same cores",
        ]
        return Prepared(
            fn=epoch,
            work=Work(items=steps * shape.batch * self.per_sample(shape), item_unit=self.unit),
            check=check,
            timing="e2e",  # the wait happens on the host: device time would hide it
            rule=rule,
            notes=notes,
            extra=extra,
            teardown=epoch.close,
            summarize=summarize,
            repeatable=False,
        )

    @staticmethod
    def per_sample(shape: Shape) -> int:
        return 1

    def _resident_batch(
        self, shape: Shape, g: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(shape.batch, 3, shape.crop, shape.crop, generator=g)
        return x, torch.randint(0, shape.classes, (shape.batch,), generator=g)

    @staticmethod
    def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    def _cache(self) -> Path:
        """--cache-dir, else the user's cache: datasets are written once, kept across runs."""
        return self.cache_dir or Path(platformdirs.user_cache_dir("torchmark")) / "input"

    def _dataset(self, shape: Shape) -> Any:
        folder = ensure_images(self._cache(), shape.images, shape.side)
        if self.dataset_factory is not None:
            return self.dataset_factory(shape, folder)
        return JpegImages(folder, shape.crop, shape.classes)

    def _model(self, shape: Shape, device: Device) -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        with torch.device(device.torch_device):
            if device.is_accelerator:
                from torchmark.workloads.models.resnet import ResNet50

                model: nn.Module = ResNet50(classes=shape.classes)
            else:
                model = SmallCNN(shape.classes)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def same_batches(got: list[Batch], want: list[Batch], cfg: LoaderConfig) -> None:
    """A faster loader that yields other batches is wrong, not fast."""
    for i, ((x, y), (wx, wy)) in enumerate(zip(got, want, strict=True)):
        if not (torch.equal(y, wy) and torch.equal(x, wx)):
            diff = float((x - wx).abs().max()) if x.shape == wx.shape else float("nan")
            raise WrongResultError(
                f"{cfg.code()}: batch {i} differs from the default loader's "
                f"(labels equal: {torch.equal(y, wy)}, max pixel difference {diff:.3g})"
            )


# A small GPT on the CPU (21 ms a step on one thread here; 56 ms at 64 tokens and a
# 2048-token vocabulary); GPT-2 small on an accelerator, 8 steps of 16 x 512 tokens an
# epoch. images = sequences, side = crop = tokens per sequence, classes = the vocabulary.
TOKENS_CPU = Shape(images=128, side=32, crop=32, batch=8, classes=1024)
TOKENS_GPU = Shape(images=128, side=512, crop=512, batch=16, classes=50257)


@WORKLOADS.register("input-tokens")
class InputTokens(InputPipeline):
    """The light loader: pre-tokenised shards read through numpy memmap feed a GPT's
    training step. Workers have little to do here; the sweep shows whether they (or
    pinned memory and a side stream) still pay."""

    name: ClassVar[str] = "input-tokens"
    summary: ClassVar[str] = (
        "DataLoader sweep feeding a GPT's training step from memmapped token shards: "
        "wait / copy / compute per step, vs the same step fed from device memory"
    )
    unit: ClassVar[str] = "tokens"
    shapes: ClassVar[dict[bool, Shape]] = {False: TOKENS_CPU, True: TOKENS_GPU}
    in_trimmed: ClassVar[bool] = False  # a GPU's standard suite leaves it to extended
    loading: ClassVar[str] = "a window of a memmapped uint16 shard cast to int64"

    @staticmethod
    def data_words(count: int, shape: Shape) -> str:
        return f"{count} sequences of {shape.side} tokens in memmapped shards"

    def _configs(self, top: list[int]) -> list[LoaderConfig]:
        # a light loader: 0 workers and a few, then the copy paths with none
        plain = [LoaderConfig(w) for w in sorted({0, min(2, top[-1])})]
        return [
            *plain,
            LoaderConfig(0, pin=True, non_blocking=True),
            LoaderConfig(0, pin=True, non_blocking=True, side_stream=True),
        ]

    @staticmethod
    def per_sample(shape: Shape) -> int:
        return shape.side

    def _resident_batch(
        self, shape: Shape, g: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.randint(0, shape.classes, (shape.batch, shape.side + 1), generator=g)
        return t[:, :-1], t[:, 1:]

    @staticmethod
    def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def _dataset(self, shape: Shape) -> Any:
        folder = ensure_tokens(self._cache(), shape.images, shape.side, shape.classes)
        return TokenShards(folder, shape.side, shape.classes)

    def _model(self, shape: Shape, device: Device) -> tuple[nn.Module, torch.optim.Optimizer]:
        from torchmark.workloads.models.gpt2 import GPT2, GPT2Config

        torch.manual_seed(0)
        if device.is_accelerator:
            c = GPT2Config(vocab=shape.classes, context=shape.side)
        else:
            c = GPT2Config(shape.classes, shape.side, layers=2, heads=4, hidden=128)
        with torch.device(device.torch_device):
            model = GPT2(c)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)
