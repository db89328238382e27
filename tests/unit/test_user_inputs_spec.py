"""Model SPEC loading and input specs: every bad input is one InputError line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from torchmark.errors import InputError
from torchmark.user import source, spec
from torchmark.user.inputs import (
    INT_HIGH,
    Inputs,
    from_callable,
    from_examples,
    from_specs,
    one_line,
    parse_input,
    per_batch,
    tensors_in,
)

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"


def test_parse_input_shapes_and_dtypes() -> None:
    s = parse_input("3x224x224")
    assert s.shape == (3, 224, 224) and s.dtype == torch.float32
    assert parse_input("128:int64").dtype == torch.int64
    assert parse_input("4X8:bf16").shape == (4, 8)


@pytest.mark.parametrize("bad", ["3xax4", "0x3", "-1", "3x3:complex7"])
def test_parse_input_rejects_bad_text_with_an_example(bad: str) -> None:
    with pytest.raises(InputError, match=r"--input"):
        parse_input(bad)


def test_random_inputs_have_batch_first_realistic_values_and_small_ids() -> None:
    make = from_specs([parse_input("3x8x8"), parse_input("16:int64")])
    x, ids = make(4).args
    assert x.shape == (4, 3, 8, 8) and x.std() > 0.5 and (x != 0).all()
    assert ids.dtype == torch.int64 and int(ids.min()) >= 0 and int(ids.max()) < INT_HIGH
    assert torch.equal(make(4).args[0], x)  # seeded: the same inputs every time


def test_examples_are_resampled_along_the_batch() -> None:
    ex = {"ids": torch.arange(6).reshape(3, 2), "w": torch.rand(3, 2)}
    make, n = from_examples(ex)
    assert n == 3 and make(3).kwargs == ex  # the examples' own batch: the examples as given
    big = make(8)
    assert big.kwargs["ids"].shape == (8, 2)
    assert set(big.kwargs["ids"][:, 0].tolist()) <= {0, 2, 4}  # real rows, not noise


def test_per_batch_makes_an_unseeded_factory_repeat_itself() -> None:
    calls: list[int] = []

    def unseeded(b: int) -> Inputs:
        calls.append(b)
        return Inputs((torch.randn(b, 4),))

    make = per_batch(unseeded)
    first = make(2).args[0]
    assert make(2).args[0] is first and make(3).args[0].shape == (3, 4)
    assert calls == [2, 3]  # each batch made once


def test_examples_with_different_batch_sizes_are_refused() -> None:
    with pytest.raises(InputError, match="batch"):
        from_examples((torch.rand(2, 3), torch.rand(3, 3)))


def test_input_factory_that_raises_is_one_line() -> None:
    def make(batch: int) -> torch.Tensor:
        raise RuntimeError("no data\nsecond line")

    factory, _ = from_callable(make, "--inputs f.py:make")
    with pytest.raises(InputError, match=r"^--inputs f.py:make raised RuntimeError: no data$"):
        factory(2)


def test_nested_outputs_are_walked() -> None:
    out = {"a": torch.ones(1), "b": (torch.zeros(2), [torch.ones(3)]), "name": "x"}
    assert [t.numel() for t in tensors_in(out)] == [1, 2, 3]
    assert Inputs.of(out).describe().startswith("a=float32[1]")


def test_load_file_factory_and_module_object() -> None:
    loaded = spec.load(f"{FIX}/cnn.py:make_model")
    assert isinstance(loaded.model, nn.Module) and loaded.source == "python"
    assert isinstance(spec.load(f"{FIX}/cnn.py:model").model, nn.Module)


def test_load_package_module() -> None:
    loaded = spec.load("torch.nn:Identity")
    assert isinstance(loaded.model, nn.Identity)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("no_such_pkg_xyz.models:make", r"no module named 'no_such_pkg_xyz'"),
        (f"{FIX}/missing.py:make", r"file not found"),
        (f"{FIX}/cnn.py:nope", r"has no 'nope'"),
        (f"{FIX}/broken.py:make_model", r"raised ValueError: hidden size must be even, got 7"),
        (f"{FIX}/broken.py:not_a_model", r"expected a torch.nn.Module"),
        ("model.pt2", r"file not found"),
        (f"{FIX}/cnn.py", r"name the factory"),
    ],
)
def test_bad_specs_are_one_line(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        spec.load(text)
    assert "\n" not in str(info.value)


def test_load_torchscript_and_exported_program(tmp_path: Path) -> None:
    model = spec.load(f"{FIX}/cnn.py:make_model").model.eval()
    x = torch.randn(2, 3, 16, 16)
    ts = tmp_path / "cnn.ts"
    torch.jit.save(torch.jit.trace(model, x), str(ts))
    loaded = spec.load(str(ts))
    assert loaded.source == "torchscript"
    torch.testing.assert_close(loaded.model(x), model(x))
    pt2 = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    exported = spec.load(str(pt2))
    assert exported.source == "export"
    torch.testing.assert_close(exported.model(x), model(x))


def test_a_file_that_is_no_model_names_both_loaders(tmp_path: Path) -> None:
    junk = tmp_path / "weights.pt"
    junk.write_bytes(b"not a model")
    with pytest.raises(InputError, match=r"torch.jit.load.*torch.export.load"):
        spec.load(str(junk))


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_model_errors_name_the_users_file_and_line_never_a_generated_module() -> None:
    broken = FIX / "broken.py"
    with pytest.raises(InputError) as e:
        spec.load(f"{broken}:make_model")
    line = _line_of(broken, 'raise ValueError("hidden size')
    assert str(e.value).endswith(f"got 7 (at {source._shown(broken)}:{line})")
    with pytest.raises(InputError) as e:
        spec.load(f"{broken}:nope")
    assert "torchmark_user_" not in str(e.value)
    assert f"{source._shown(broken)} has no 'nope'" in str(e.value)
    # an error raised inside torch, called from the user's forward, names the forward's line
    model = spec.load(f"{broken}:oom_model").model
    with pytest.raises(torch.OutOfMemoryError) as oom:
        model(torch.ones(8, 8))
    line = _line_of(broken, "raise torch.OutOfMemoryError")
    assert one_line(oom.value).endswith(f"(at {source._shown(broken)}:{line})")


def test_generated_module_names_never_reach_the_message(tmp_path: Path) -> None:
    f = tmp_path / "mymodel.py"
    f.write_text("class Net:\n    pass\n\ndef make():\n    raise TypeError(f'no {Net!r}')\n")
    with pytest.raises(InputError) as e:
        spec.load(f"{f}:make")
    assert "torchmark_user_" not in str(e.value)
    assert f"TypeError: no <class 'mymodel.Net'> (at {f}:5)" in str(e.value)


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "syn.py"
    f.write_text("import torch\n\ndef make(:\n    pass\n")
    with pytest.raises(InputError, match=r"SyntaxError: .* \(at .*syn\.py:3\)$") as e:
        spec.load(f"{f}:make")
    assert "torchmark_user_" not in str(e.value)
