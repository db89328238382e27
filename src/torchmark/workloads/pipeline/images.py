"""A synthetic JPEG image dataset, written once to a cache directory, and the ``Dataset``
that decodes and augments it the way an ImageNet training loop does (plain torch + Pillow:
torchvision is not a dependency).

Every image's augmentation is drawn from a generator seeded by (seed, index), so the same
index gives the same tensor whichever worker process decodes it, in any order: that is what
lets the sweep check each loader configuration's batches against the default's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from torchmark.errors import InputError

# ImageNet's per-channel mean and std (RGB, 0-1 scale): the normalisation every recipe uses.
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
DONE = "complete"  # written last: a folder without it was interrupted and is written again


def ensure_images(cache_dir: Path, count: int, side: int, seed: int = 0) -> Path:
    """The folder of ``count`` JPEGs about ``side`` pixels across, written when missing."""

    def write(folder: Path) -> str:
        rng = np.random.default_rng(seed)
        for i in range(count):
            photo_like(rng, side).save(folder / f"{i:06d}.jpg", quality=90)
        return f"{count} images\n"

    return write_once(Path(cache_dir) / f"jpeg-{count}x{side}-seed{seed}", write)


def write_once(folder: Path, write: Callable[[Path], str]) -> Path:
    """``folder``, filled by ``write`` unless an earlier call finished it; ``write`` returns
    the text of the DONE file, written last. A full or read-only disk is one InputError."""
    if (folder / DONE).exists():
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / DONE).write_text(write(folder))
    except OSError as e:
        raise InputError(
            f"cannot write the input dataset to {folder} ({e.strerror or e}): "
            "pass --cache-dir a writable directory with room for it"
        ) from None
    return folder


def photo_like(rng: np.random.Generator, side: int) -> Image.Image:
    """Smooth colour fields plus grain: it compresses (and decodes) like a photo, ~10x less
    than pure noise and ~10x more than a flat image. Sizes vary by +-25 % as ImageNet's do."""
    w, h = (int(side * f) for f in rng.uniform(0.75, 1.25, 2))
    coarse = rng.integers(0, 256, (max(h // 16, 2), max(w // 16, 2), 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC))
    grain = rng.normal(0, 12, img.shape)
    return Image.fromarray(np.clip(img + grain, 0, 255).astype(np.uint8))


class JpegImages(Dataset[tuple[torch.Tensor, int]]):
    """Decode, random resized crop (scale 0.08-1, ratio 3/4-4/3), flip, normalise."""

    def __init__(self, folder: Path, crop: int, classes: int = 1000, seed: int = 0) -> None:
        self.files = sorted(Path(folder).glob("*.jpg"))
        self.crop, self.classes, self.seed = crop, classes, seed

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        with Image.open(self.files[i]) as f:
            img = f.convert("RGB")
        box = crop_box(img.width, img.height, g)
        img = img.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box=box)
        x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float().div_(255)
        if torch.rand((), generator=g) < 0.5:
            x = x.flip(-1)
        return (x - MEAN) / STD, i % self.classes


def crop_box(w: int, h: int, g: torch.Generator) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box: 10 tries at a random area and aspect ratio,
    then the centre crop clamped to the ratio range."""
    area = w * h
    lo, hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        u = torch.rand(4, generator=g).tolist()
        target = area * (0.08 + u[0] * 0.92)
        ratio = math.exp(lo + u[1] * (hi - lo))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = int(u[2] * (w - cw + 1)), int(u[3] * (h - ch + 1))
            return x, y, x + cw, y + ch
    cw, ch = (w, round(w / (4 / 3))) if w / h > 4 / 3 else (w, h)
    if w / h < 3 / 4:
        cw, ch = w, round(w / (3 / 4))
    x, y = (w - cw) // 2, (h - ch) // 2
    return x, y, x + cw, y + ch
