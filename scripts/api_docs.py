"""Builds the API reference (pdoc) of tfpriv's public API into a folder; any warning is an error.

    python scripts/api_docs.py OUT_DIR      (scripts/api_docs.sh: into a temporary folder, for CI)

The public API is `MODULES`' `__all__`: the top level (`tfpriv`), the engine (`tfpriv.privacy`),
planned private training (`tfpriv.training.runner`) and the synthesizer (`tfpriv.synthesizer`).
Docstrings are Google style; every public class and function carries an example
(tests/test_api_docs.py).
"""
from __future__ import annotations

import importlib
import pathlib
import sys
import warnings
from types import ModuleType

MODULES = ("tfpriv", "tfpriv.privacy", "tfpriv.training.runner", "tfpriv.synthesizer", "tfpriv.jobs.schema",
           "tfpriv.jobs.job", "tfpriv.jobs.pipeline", "tfpriv.jobs.serving")


def public_names(module: ModuleType) -> list[str]:
    """The names a module documents: its `__all__` without dunders."""
    return [name for name in module.__all__ if not name.startswith("__")]


def require_pdoc() -> None:
    """Exits with one line naming requirements-docs.txt (code 2) when pdoc is not installed, before
    TensorFlow is imported; the traceback of a failed `import pdoc` did not say what to install."""
    try:
        import pdoc  # noqa: F401
    except ImportError:
        print("error: pdoc is not installed: pip install -r requirements-docs.txt", file=sys.stderr)
        sys.exit(2)


def build(out_dir: str) -> None:
    """Writes the HTML reference to `out_dir`; raises RuntimeError listing pdoc's warnings, if any."""
    import pdoc
    import pdoc.render

    for name in MODULES:  # imported first: TensorFlow's import-time warnings are not the reference's
        module = importlib.import_module(name)
        for member in public_names(module):
            getattr(module, member)
    pdoc.render.configure(docformat="google", show_source=False)
    # "tfpriv" would add every subpackage: "!tfpriv\." keeps the listed modules only.
    specs = [MODULES[0], r"!tfpriv\.", *MODULES[1:]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*specs, output_directory=pathlib.Path(out_dir))
    if caught:
        raise RuntimeError("API reference: pdoc warned:\n" + "\n".join(
            f"  {w.category.__name__}: {w.message}" for w in caught))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/api_docs.py OUT_DIR")
    require_pdoc()
    try:
        build(sys.argv[1])
    except RuntimeError as exc:
        sys.exit(str(exc))
    print(f"API reference: {', '.join(MODULES)} -> {sys.argv[1]}")
