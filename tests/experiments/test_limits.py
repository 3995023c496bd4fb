"""experiments/ stays a record, not a notebook (issue #51): at most 150 tracked files, every script named
in a README, no README line over 300 characters, every relative README link resolving, and no code in
tfpriv/ that only the experiments use (nothing in tfpriv/ imports `experiments`)."""
import re
import subprocess

import pytest

from tests.conftest import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "experiments"
MAX_FILES = 150
MAX_LINE = 300
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def experiment_files() -> list[str]:
    """Tracked files under experiments/ (relative to the repository root); the files on disk outside git."""
    try:
        out = subprocess.run(["git", "ls-files", "experiments"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if out:
        return [f for f in out if (REPO_ROOT / f).exists()]  # a file deleted in the work tree no longer counts
    return [str(p.relative_to(REPO_ROOT)) for p in EXPERIMENTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def readmes() -> list:
    return sorted(EXPERIMENTS.rglob("*.md"))


def test_at_most_150_files_under_experiments():
    files = experiment_files()
    assert len(files) <= MAX_FILES, f"{len(files)} files under experiments/ (limit {MAX_FILES}): aggregate runs " \
                                    "into runs.jsonl and images into one figure (experiments/README.md)"


def test_no_readme_line_over_300_characters():
    long = [f"{p.relative_to(REPO_ROOT)}:{i}: {len(line)} characters"
            for p in readmes() for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert long == []


def test_every_relative_link_of_a_study_readme_resolves():
    broken = [f"{p.relative_to(REPO_ROOT)}: {target}" for p in readmes() for target in LINK.findall(p.read_text())
              if "://" not in target and not (p.parent / target).exists()]
    assert broken == []


@pytest.mark.parametrize("doc", ["README.md", "docs/guide.md", "docs/audit.md", "docs/dpimagebench.md"])
def test_the_products_links_into_experiments_resolve(doc):
    text = (REPO_ROOT / doc).read_text()
    targets = [t for t in LINK.findall(text) if "experiments/" in t and "://" not in t]
    assert [t for t in targets if not ((REPO_ROOT / doc).parent / t).exists()] == []


def test_every_script_is_named_in_a_readme():
    text = "\n".join(p.read_text() for p in readmes())
    scripts = [f for f in experiment_files() if f.endswith((".py", ".sh")) and not f.endswith("__init__.py")]
    assert [f for f in scripts if f.rsplit("/", 1)[1] not in text] == []


def test_no_product_module_imports_the_experiments():
    offenders = [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "tfpriv").rglob("*.py")
                 if re.search(r"^\s*(from|import) experiments\b", p.read_text(), re.M)]
    assert offenders == []


def test_a_crossed_limit_is_reported(tmp_path):
    """The checks themselves: a long line and a broken link are found."""
    readme = tmp_path / "README.md"
    readme.write_text("x" * 301 + "\n[a](missing.png) [b](README.md) [c](https://example.org/x)\n")
    lines = [len(line) for line in readme.read_text().splitlines() if len(line) > MAX_LINE]
    broken = [t for t in LINK.findall(readme.read_text()) if "://" not in t and not (tmp_path / t).exists()]
    assert lines == [301] and broken == ["missing.png"]


def test_the_experiment_only_code_of_issue_51_lives_in_experiments():
    from tfpriv.audit import canary
    assert not any(hasattr(canary, name) for name in ("vae_canary_run", "gan_canary_run", "many_run_audit"))
    assert not (REPO_ROOT / "tfpriv" / "gan" / "plots.py").exists()
    assert (EXPERIMENTS / "audit" / "canaries.py").exists() and (EXPERIMENTS / "dpwgan" / "plots.py").exists()
