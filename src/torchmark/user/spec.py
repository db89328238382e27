"""Load the user's model from a SPEC string. Loading runs the user's code.

    package.module:factory     import the module, take ``factory``
    path/to/file.py:factory    run the file as a module, take ``factory``
    model.pt2                  a ``torch.export`` program (torch.export.load)
    model.pt / model.ts        a TorchScript file (torch.jit.load, on the CPU)

``factory`` is a callable returning the model (called with no arguments) or the model
object itself. Every failure is one InputError line naming what was tried.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchmark.errors import InputError
from torchmark.user import source
from torchmark.user.source import one_line

EXPORT_SUFFIXES = (".pt2",)


@dataclass
class LoadedModel:
    model: nn.Module
    spec: str
    source: str  # "python" | "export" | "torchscript" | "object"


def load(spec: str) -> LoadedModel:
    """The model named by ``spec`` (see the module docstring), on the CPU, in eval mode."""
    spec = spec.strip()
    path = Path(spec)
    if ":" not in spec or (path.suffix and path.exists() and path.is_file()):
        return _load_file(spec)
    return LoadedModel(as_module(attribute(spec), spec), spec, "python")


def attribute(spec: str) -> Any:
    """The object named by ``module:name`` or ``file.py:name`` (importing runs the file)."""
    target, _, attr = spec.strip().rpartition(":")
    if not target or not attr:
        raise InputError(f"spec {spec!r}: write module:name or path/to/file.py:name")
    return _attribute(_import_target(target, spec), attr, spec)


def load_object(obj: Any, what: str) -> Any:
    """A factory's attribute value: the model itself, or what calling the factory returns."""
    if isinstance(obj, nn.Module):
        return obj
    if callable(obj):
        try:
            return obj()
        except Exception as e:
            raise InputError(f"{what}: calling the factory raised {one_line(e)}") from e
    return obj


def as_module(obj: Any, spec: str) -> nn.Module:
    obj = load_object(obj, spec)
    if isinstance(obj, torch.export.ExportedProgram):
        obj = obj.module()
    if not isinstance(obj, nn.Module):
        raise InputError(
            f"{spec}: expected a torch.nn.Module (or a callable returning one), "
            f"got {type(obj).__name__}"
        )
    return obj


def _import_target(target: str, spec: str) -> Any:
    if target.endswith(".py") or "/" in target or "\\" in target:
        return _import_file(Path(target), spec)
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as e:
        raise InputError(
            f"model spec {spec!r}: no module named {e.name or target!r} "
            f"(tried import {target}; is it installed or on PYTHONPATH?)"
        ) from e
    except Exception as e:
        raise InputError(f"model spec {spec!r}: importing {target} raised {one_line(e)}") from e
    if module.__file__:
        source.register(module.__file__)  # errors in it name its file and line
    return module


def _import_file(path: Path, spec: str) -> Any:
    if not path.is_file():
        raise InputError(f"model spec {spec!r}: file not found: {path}")
    # a unique module name per file, so two user files called model.py do not collide
    name = source.GENERATED_PREFIX + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    source.register(path, name)
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise InputError(f"model spec {spec!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise InputError(f"model spec {spec!r}: running {path} raised {one_line(e)}") from e
    return module


def _attribute(module: Any, attr: str, spec: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(module) if not n.startswith("_")]
            hint = f"; it has: {', '.join(names[:12])}" if names else ""
            where = source.module_label(module.__name__)
            raise InputError(f"model spec {spec!r}: {where} has no {attr!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _load_file(spec: str) -> LoadedModel:
    path = Path(spec)
    if not path.is_file():
        raise InputError(
            f"model spec {spec!r}: file not found (write module:factory, file.py:factory, "
            "a .pt2 exported program or a TorchScript file)"
        )
    if path.suffix == ".py":
        raise InputError(f"model spec {spec!r}: name the factory too, e.g. {spec}:make_model")
    if not zipfile.is_zipfile(path):
        # both formats are zip archives; trying torch's loaders on anything else printed
        # a page of torch.export warnings and a 400-character miniz error
        raise InputError(
            f"model file {spec!r} is not a zip archive, so neither torch.jit.load nor "
            "torch.export.load reads it: give a TorchScript file, an exported program (.pt2), "
            "or module:factory / file.py:factory for Python code"
        )
    loaders: list[tuple[str, Callable[[], Any]]] = [
        ("torch.export.load", lambda: torch.export.load(str(path)).module()),
        ("torch.jit.load", lambda: torch.jit.load(str(path), map_location="cpu")),
    ]
    if path.suffix not in EXPORT_SUFFIXES:
        loaders.reverse()
    errors = []
    for name, loader in loaders:
        try:
            model = loader()
        except Exception as e:
            errors.append(f"{name}: {one_line(e)}")
            continue
        source = "export" if name.startswith("torch.export") else "torchscript"
        return LoadedModel(model, spec, source)
    raise InputError(f"model file {spec!r} could not be loaded ({'; '.join(errors)})")
