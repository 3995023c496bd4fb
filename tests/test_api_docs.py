"""The API reference (scripts/api_docs.py): every public class and function of the documented modules
has a docstring with an example (a Google-style `Example:` section or a `>>>` doctest)."""
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys

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


def test_without_pdoc_the_script_says_what_to_install_in_one_line(tmp_path):
    """`bash scripts/api_docs.sh` with a `python` that has no pdoc (was an ImportError traceback)."""
    shim = tmp_path / "python"
    no_pdoc = "import runpy, sys; sys.modules['pdoc'] = None; sys.argv = sys.argv[1:]; " \
              "runpy.run_path(sys.argv[0], run_name='__main__')"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{no_pdoc}" "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "api_docs.sh"), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: pdoc is not installed: pip install -r requirements-docs.txt\n"
