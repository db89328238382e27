"""One doctor check's verdict, and the facts every check reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]
Facts = dict[str, Any]
GIB = 1024**3


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
