"""Pre-tokenised shards, written once to a cache directory and read through numpy memmap:
the light loader of a language model's training loop (a slice and a dtype cast per
sample, microseconds), next to the image pipeline's heavy one (a JPEG decode, ~1-4 ms).

Tokens are stored as uint16 (GPT-2's 50,257-token vocabulary fits), split over a few
shard files as nanoGPT's and torchtitan's loaders read them; a sample is a window of
``seq + 1`` tokens that never crosses a shard, split into input and next-token target.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from torchmark.workloads.pipeline.images import write_once

SHARDS = 4


def ensure_tokens(cache_dir: Path, sequences: int, seq: int, vocab: int, seed: int = 0) -> Path:
    """The folder of shards holding ``sequences`` windows of ``seq`` tokens, written when
    missing."""
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    per_shard = math.ceil(sequences / SHARDS)

    def write(folder: Path) -> str:
        rng = np.random.default_rng(seed)
        left = sequences
        for i in range(SHARDS):
            n = min(per_shard, left)
            left -= n
            if n <= 0:
                break
            rng.integers(0, vocab, n * seq + 1, dtype=dtype).tofile(folder / f"{i:03d}.bin")
        return f"{sequences} x {seq} tokens, {np.dtype(dtype).name}\n"

    return write_once(Path(cache_dir) / f"tokens-{sequences}x{seq}-v{vocab}-seed{seed}", write)


class TokenShards(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Window ``i``: ``seq`` tokens and the same shifted by one, from a memmapped shard.
    The maps open in the process that reads them: a worker maps the files itself
    instead of receiving a pickled copy of their contents."""

    def __init__(self, folder: Path, seq: int, vocab: int) -> None:
        self.files = sorted(Path(folder).glob("*.bin"))
        self.seq = seq
        self.dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
        size = np.dtype(self.dtype).itemsize
        self.counts = [(f.stat().st_size // size - 1) // seq for f in self.files]
        self.starts = np.cumsum([0, *self.counts])
        self._maps: list[np.memmap] | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._maps is None:
            self._maps = [np.memmap(f, dtype=self.dtype, mode="r") for f in self.files]
        shard = int(np.searchsorted(self.starts, i, side="right")) - 1
        k = (i - int(self.starts[shard])) * self.seq
        window = torch.from_numpy(self._maps[shard][k : k + self.seq + 1].astype(np.int64))
        return window[:-1], window[1:]
