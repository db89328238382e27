"""cli/target.py: the user's model and its inputs, loaded the same way for `model`, `tune`
and `profile`; each bad combination is one InputError naming the fix, raised before the
model's file runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchmark.cli.target import load_target, user_callable
from torchmark.errors import InputError

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"
CNN = f"{FIX}/cnn.py:make_model"
TWO = f"{FIX}/two_inputs.py"


def test_shapes_make_inputs_and_the_stored_config() -> None:
    user = load_target(CNN, ["3x16x16"], None)
    assert isinstance(user.model, torch.nn.Module)
    assert user.name == "cnn.py:make_model"
    assert user.config == {"spec": CNN, "source": user.source, "inputs": ["3x16x16"]}
    assert user.command_line == f"{CNN} --input 3x16x16"
    made = user.factory(2)
    (x,) = made.args
    assert tuple(x.shape) == (2, 3, 16, 16)


def test_a_make_inputs_function_feeds_keyword_inputs() -> None:
    user = load_target(f"{TWO}:make_model", None, f"{TWO}:make_inputs")
    assert user.config["inputs"] == f"{TWO}:make_inputs"
    assert user.command_line == f"{TWO}:make_model --inputs {TWO}:make_inputs"
    made = user.factory(3)
    assert set(made.kwargs) == {"ids", "weight"} and made.kwargs["ids"].shape == (3, 12)
    out = user.model(*made.args, **made.kwargs)
    assert out.shape == (3, 2)


@pytest.mark.parametrize(
    ("shapes", "inputs", "message"),
    [
        (None, None, "the model needs inputs: give --input SHAPE (e.g. --input 3x224x224) or "),
        (["8"], f"{TWO}:make_inputs", "give either --input shapes or --inputs"),
        (None, f"{TWO}:TwoInputs.nope", "has no"),
        (None, f"{FIX}/missing.py:make_inputs", "file not found"),
    ],
)
def test_bad_inputs_fail_before_the_model_file_runs(
    shapes: list[str] | None, inputs: str | None, message: str
) -> None:
    spec = f"{FIX}/broken.py:make_model"  # would raise its own error if it were loaded
    with pytest.raises(InputError) as e:
        load_target(spec, shapes, inputs)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_value_that_is_not_a_function_says_what_to_write(tmp_path: Path) -> None:
    f = tmp_path / "data.py"
    f.write_text("make_loader = 3\n")
    with pytest.raises(InputError) as e:
        user_callable("--loader", f"{f}:make_loader", "make_loader()")
    assert str(e.value) == f"--loader {f}:make_loader: not callable (write a make_loader())"
