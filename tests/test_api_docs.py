"""The API reference (scripts/api_docs.py): every public class and function of the documented modules
has a docstring with an example (a Google-style `Example:` section or a `>>>` doctest)."""
import importlib
import importlib.util
import inspect

import pytest

from tests.conftest import REPO_ROOT


def _api_docs():
    spec = importlib.util.spec_from_file_location("api_docs", REPO_ROOT / "scripts" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API_DOCS = _api_docs()


def has_example(doc: str | None) -> bool:
    return bool(doc) and ("Example:" in doc or "Examples:" in doc or ">>>" in doc)


def test_has_example_needs_an_example_section_or_a_doctest():
    assert has_example("Does x.\n\nExample:\n    f(1)") and has_example("Does x.\n\n>>> f(1)\n2")
    assert not has_example("Does x.") and not has_example(None) and not has_example("See the examples folder.")


@pytest.mark.parametrize("module_name", API_DOCS.MODULES)
def test_every_public_class_and_function_has_a_docstring_with_an_example(module_name):
    module = importlib.import_module(module_name)
    missing = []
    for name in API_DOCS.public_names(module):
        obj = getattr(module, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not has_example(obj.__doc__):
            missing.append(name)
    assert not missing, f"{module_name}: no docstring with an example: {', '.join(missing)}"
