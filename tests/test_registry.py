"""tfpriv.registry.Registry: order, first=True, refused duplicates, the one-line lookup error."""
import pytest

from tfpriv.errors import ConfigError
from tfpriv.registry import Registry


def registry(**kwargs) -> Registry[str]:
    out = Registry("accountant", **kwargs)
    out.register("rdp", "RDP")
    out.register("pld", "PLD")
    return out


def test_names_and_values_keep_registration_order():
    reg = registry()
    assert reg.names() == ("rdp", "pld") and reg.values() == ("RDP", "PLD")
    assert reg.get("pld") == "PLD"
    assert "rdp" in reg and "x" not in reg and ["rdp"] not in reg


def test_first_goes_ahead_of_those_already_registered():
    reg = registry()
    assert reg.register("user", "USER", first=True) == "USER"
    reg.register("last", "LAST")
    assert reg.names() == ("user", "rdp", "pld", "last")


def test_a_taken_name_is_refused_unless_it_is_the_same_value():
    reg = registry()
    value = reg.get("rdp")
    assert reg.register("rdp", value, first=True) is value
    assert reg.names() == ("rdp", "pld")
    with pytest.raises(ValueError, match=r"^name: accountant 'rdp' is already registered to another value"):
        reg.register("rdp", "other")
    assert reg.get("rdp") is value


def test_remove_returns_the_value_and_frees_the_name():
    reg = registry()
    assert reg.remove("rdp") == "RDP" and reg.names() == ("pld",)
    reg.register("rdp", "other")
    assert reg.names() == ("pld", "rdp")


def test_an_unknown_name_is_one_line_naming_the_parameter_and_the_valid_names():
    with pytest.raises(LookupError) as err:
        registry().get("x")
    assert str(err.value) == "accountant: must be one of rdp, pld, got 'x'"


@pytest.mark.parametrize("name", ["", None, ["rdp"]])
def test_the_caller_chooses_the_error_its_parameter_and_names_resolved_elsewhere(name):
    reg = registry(parameter="method", error=ConfigError, also_valid=("tfds:<name>",))
    with pytest.raises(ConfigError) as err:
        reg.get(name)
    assert str(err.value) == f"method: must be one of rdp, pld, tfds:<name>, got {name!r}"
    assert err.value.param == "method"


def test_a_copy_holds_the_same_values_and_changes_apart():
    reg = registry(parameter="method", error=ConfigError)
    copy = reg.copy()
    copy.remove("rdp")
    copy.register("x", "X")
    assert reg.names() == ("rdp", "pld") and copy.names() == ("pld", "x")
    with pytest.raises(ConfigError, match="^method: must be one of pld, x, got 'rdp'$"):
        copy.get("rdp")
