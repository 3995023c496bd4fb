"""A family's settings declared once (`tfpriv.jobs.schema`): defaults per model and derived ones, the
checks made from the bounds and choices, the types, the synthesizer's fields, the one DPConfig builder."""
from __future__ import annotations

import dataclasses

import pytest

from tfpriv.errors import UsageError
from tfpriv.jobs import schema
from tfpriv.jobs.schema import Derived, PrivateSettings, setting


@dataclasses.dataclass(frozen=True, kw_only=True)
class Demo(PrivateSettings):
    epochs: int = schema.epochs(per_model={"big": 40})
    batch_size: int = schema.batch_size(8)
    learning_rate: float = schema.learning_rate(Derived(lambda v: v["batch_size"] * 0.5, "batch_size x 0.5"))
    width: int | None = setting(None, "Width.", ge=1)
    ema: float = setting(0.0, "EMA.", ge=0, lt=1)
    rate: float = setting(1.0, "Rate.", gt=0)
    mode_: str = setting("a", "Mode.", choices=("a", "b"))
    kinds: list = setting([], "Kinds.")
    plots: bool = setting(True, "Plots.", evaluation=True)
    clip: float = setting(0.0, "Clip (0: off).", ge=0, note="0: off")


def test_defaults_per_model_derived_from_the_others_and_given_values_win():
    s = schema.make(Demo, "small")
    assert (s.epochs, s.batch_size, s.learning_rate, s.dataset, s.aggregation) == (20, 8, 4.0, "digits", "termwise")
    assert s.given == frozenset()
    assert schema.make(Demo, "big").epochs == 40
    s = schema.make(Demo, "big", batch_size=10, epochs=3)
    assert (s.epochs, s.learning_rate, s.given) == (3, 5.0, {"batch_size", "epochs"})
    assert schema.make(Demo, "small", learning_rate=0.1).learning_rate == 0.1


@pytest.mark.parametrize("values,message", [
    ({"width": 0}, "--width: must be >= 1, got 0"),
    ({"ema": 1.0}, "--ema: must be in [0, 1), got 1.0"),
    ({"rate": 0.0}, "--rate: must be a positive finite number, got 0.0"),
    ({"rate": float("inf")}, "--rate: must be a positive finite number, got inf"),
    ({"clip": -1.0}, "--clip: must be a finite number >= 0 (0: off), got -1.0"),
    ({"mode_": "c"}, "--mode_: must be one of a, b, got 'c'"),
    ({"aggregation": "most"}, "--aggregation: must be one of none, micro, batch, termwise, got 'most'"),
    ({"seed": -1}, "--seed: must be in [0, 4294967295], got -1"),
    ({"epochs": 2.5}, "--epochs: must be an integer, got 2.5"),
    ({"epochs": True}, "--epochs: must be an integer, got True"),
    ({"rate": "1"}, "--rate: must be a number, got '1'"),
    ({"plots": 1}, "--plots: must be true or false, got 1"),
    ({"batch_size": None}, "--batch_size: must be an integer, got None"),
    ({"colour": 1}, "colour: not a setting of --model=small"),
])
def test_every_value_is_checked_against_its_declaration(values, message):
    with pytest.raises(UsageError) as err:
        schema.make(Demo, "small", **values)
    assert str(err.value) == message


def test_types_are_taken_as_the_setting_holds_them():
    s = schema.make(Demo, "small", rate=2, kinds="x, y", width=None)
    assert s.rate == 2.0 and isinstance(s.rate, float) and s.kinds == ["x", "y"] and s.width is None
    assert schema.make(Demo, "small", kinds=("z",)).kinds == ["z"]


def test_a_setting_of_an_unsupported_type_is_refused_when_the_schema_is_read():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bad(PrivateSettings):
        pair: tuple = setting((1, 2), "Two numbers.")

    with pytest.raises(TypeError, match="Bad.pair: a setting is one of bool, int, float, str, list"):
        schema.schema(Bad)


def test_the_synthesizer_takes_neither_the_data_source_nor_the_noise_nor_the_evaluation():
    fields = schema.synthesizer_fields(Demo)
    assert {"epochs", "batch_size", "learning_rate", "l2_norm_clip", "seed", "width"} <= set(fields)
    assert not {"dataset", "data_dir", "noise_multiplier", "epsilon", "delta", "max_epsilon", "plots"} & set(fields)


def test_dp_config_is_built_from_the_settings_it_shares_with_dpconfig():
    config = schema.make(Demo, "small", aggregation="micro", l2_norm_clip=0.5, noise_multiplier=2.0,
                         seed=3).dp_config(num_partitions=1)
    assert (config.aggregation, config.l2_norm_clip, config.noise_multiplier, config.seed, config.num_partitions) == (
        "micro", 0.5, 2.0, 3, 1)


def test_a_record_holds_the_model_and_every_setting_but_the_data_folder():
    record = schema.make(Demo, "small").record()
    assert record["model"] == "small" and record["epochs"] == 20 and "data_dir" not in record and "given" not in record
