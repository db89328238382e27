"""Explicit registries: ``register(name)``, ``get(name)``, ``names()``.

Third-party plug-ins join through the entry-point group named at construction, loaded once
on first lookup. Nothing is found by import-path strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from torchmark.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._group = entry_point_group
        self._plugins_loaded = entry_point_group is None

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = item
            return item

        return add

    def add(self, name: str, item: T) -> T:
        return self.register(name)(item)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self._group or ""):
            if ep.name not in self._items:
                self._items[ep.name] = ep.load()

    def get(self, name: str) -> T:
        self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        self._load_plugins()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
