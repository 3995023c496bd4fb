"""Rewrites `tf.keras` to tfpriv's Keras 2 (`from tfpriv.compat import keras`) in the Python files of
tfpriv/, tests/, bench/, scripts/, experiments/ and train.py; idempotent, so it can be re-run after merging code
that still says `tf.keras`. Run from the repository root: `python tools/use_compat_keras.py`.

Per file that mentions `tf.keras` (tfpriv/compat.py and its test excepted): every `tf.keras` becomes `keras`.
A module-level `import tensorflow as tf` gets `from tfpriv.compat import keras` in the module's
first-party imports (sorted; after the last import if there are none); a function's own
`import tensorflow as tf` gets it on the next line if that function used `tf.keras`. An
`import tensorflow as tf` whose scope no longer uses `tf` is dropped. Prints the files it changed.
"""
import ast
import pathlib
import re
import sys

ROOTS = ("tfpriv", "tests", "bench", "scripts", "experiments", "train.py")
SKIP = {"tfpriv/compat.py", "tests/test_compat.py"}  # the module itself; its test names tf.keras
TF_KERAS = re.compile(r"\btf\.keras\b")
TF_IMPORT = re.compile(r"^(\s*)import tensorflow as tf(\s*#.*)?$")  # with its comment, e.g. noqa
TF_NAME = re.compile(r"\btf\b")
COMPAT_MODULE = "tfpriv.compat"
COMPAT = f"from {COMPAT_MODULE} import keras"
FIRST_PARTY = ("tfpriv", "tests")


def scope_end(lines: list[str], i: int) -> int:
    """The end (exclusive) of the block holding line i: the module, or the body of an indented import."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    if indent == 0:
        return len(lines)
    for j in range(i + 1, len(lines)):
        if lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) < indent:
            return j
    return len(lines)


def module_slot(tree: ast.Module) -> tuple[int, bool]:
    """The 0-based line before which the module-level compat import goes, and whether it opens a new
    import group (no first-party imports yet)."""
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    first_party = [n for n in imports if isinstance(n, ast.ImportFrom) and n.level == 0
                   and (n.module or "").split(".")[0] in FIRST_PARTY]
    for node in first_party:
        if node.module > COMPAT_MODULE:
            return node.lineno - 1, False
    if first_party:
        return first_party[-1].end_lineno, False
    return imports[-1].end_lineno, True


def rewrite(source: str) -> str:
    lines = source.split("\n")
    new = [TF_KERAS.sub("keras", line) for line in lines]
    drop: set[int] = set()
    after: dict[int, list[str]] = {}
    for i, line in enumerate(lines):
        match = TF_IMPORT.match(line)
        if not match:
            continue
        end = scope_end(lines, i)
        if not any(TF_KERAS.search(s) for s in lines[i + 1:end]):
            continue
        if not any(TF_NAME.search(s) for s in new[i + 1:end]):
            drop.add(i)
        if match.group(1):
            after.setdefault(i, []).append(match.group(1) + COMPAT + (match.group(2) or ""))
        elif COMPAT not in source:
            slot, new_group = module_slot(ast.parse(source))
            line = COMPAT + (match.group(2) or "")
            after.setdefault(slot - 1, []).extend(["", line] if new_group else [line])
    if TF_KERAS.search(source) and not after:
        raise ValueError("tf.keras used without `import tensorflow as tf` in its scope")
    out = []
    for i, line in enumerate(new):
        if i not in drop:
            out.append(line)
        out.extend(after.get(i, []))
    return "\n".join(out)


def python_files(repo: pathlib.Path) -> list[pathlib.Path]:
    """The files to rewrite, relative to the repository root `repo`."""
    paths = [repo / root for root in ROOTS]
    files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    return [f.relative_to(repo) for f in files if f.relative_to(repo).as_posix() not in SKIP]


def main() -> None:
    for path in python_files(pathlib.Path(".")):
        source = path.read_text()
        if not TF_KERAS.search(source):
            continue
        try:
            path.write_text(rewrite(source))
        except ValueError as e:
            sys.exit(f"{path}: {e}")
        print(path)


if __name__ == "__main__":
    main()
