"""Every Python block in README.md and docs/*.md runs as written (issue 32 item 13).

The files run in the README's reading order (README.md, the documents its Documentation list
links, in that order, then any other), all in one temporary folder, as one reader working in one
folder would run them: a run folder one document writes must not clash with another's (issue 50
item 5: README's and the guide's synthesizer both saved to runs/synth). The blocks of one file run
in order in one fresh Python process (a later block uses the names an earlier one defined, as a
reader would), after the file's setup: the run folders its blocks load. The user guide's `runs/fm` is a real (one-epoch, digits) `train.py`
run; `runs/gan` and `runs/filter` are untrained models saved in a run's layout, since training
them takes minutes and the blocks only load and sample them. A block fenced ```python no-run
is illustrative and skipped.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.cli.helpers import train_py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reading_order() -> list[str]:
    """README.md, the docs/*.md its "Documentation" section links (in that order), then the other docs/*.md."""
    readme = open(os.path.join(REPO, "README.md")).read()
    linked = re.findall(r"\]\((docs/[^)#]+\.md)", readme.split("\n## Documentation\n", 1)[1])
    every = sorted(f"docs/{name}" for name in os.listdir(os.path.join(REPO, "docs")) if name.endswith(".md"))
    return ["README.md", *dict.fromkeys(d for d in linked if d in every), *[d for d in every if d not in linked]]


DOCS = reading_order()
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)

# The run folders a file's blocks load, made before its blocks run (train.py command lines, run
# in this process as train.py runs them, then Python in the blocks' process but in a namespace of
# its own, so that it cannot supply a name a block forgot to define).
SETUP = {
    "docs/guide.md": (
        [["--model=privae", "--dataset=digits", "--epochs=1", "--seed=0", "--verbose=0", "--output_dir=runs/fm"]],
        """
import os, types
from tfpriv.files import write_json
from tfpriv.filter.filters import build_filter
from tfpriv.filter.pipeline import save_filter
from tfpriv.gan.training import save_generator
from tfpriv.gan.wgan_gp import make_dpwgan_gp
from tfpriv.privae.architectures import build_architecture
from tfpriv.privae.vae import VAE

gan = make_dpwgan_gp(capacity=2, latent_size=4, num_classes=10, seed=0)
save_generator(gan, "runs/gan", {"model": "dpwgan_gp", "capacity": 2, "latent_size": 4, "num_classes": 10})
encoder, decoder = build_architecture("mlp", (28, 28, 1), 4)
VAE(encoder, decoder).save_vae("runs/filter/vae")
save_filter(types.SimpleNamespace(filter_layer=build_filter("linear", 4, 2)), "runs/filter/filter/",
            {"budget": 1.0, "private_label": "digit >= 5"})
for run, model in (("runs/gan", "dpwgan_gp"), ("runs/filter", "filter")):  # the family tfpriv.load uses
    write_json(f"{run}/results.json", {"model": model})
"""),
}

RUNNER = r"""
import json, sys, traceback
spec = json.load(open(sys.argv[1]))
exec(compile(spec["setup"], "<setup>", "exec"), {})
namespace = {"__name__": "__main__"}
for block in spec["blocks"]:
    try:
        exec(compile(block["code"], block["where"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"FAILED: the block at {block['where']}")
"""


def python_blocks(text: str, name: str) -> list[dict]:
    """The runnable ```python blocks of a Markdown text, each with its file:line."""
    blocks = []
    for match in FENCE.finditer(text):
        if "no-run" in match.group(1).split():
            continue
        line = text.count("\n", 0, match.start(2)) + 1
        blocks.append({"where": f"{name}:{line}", "code": "\n" * (line - 1) + match.group(2)})
    return blocks


def test_blocks_are_found_with_their_lines_and_no_run_is_skipped():
    text = "intro\n```python\nx = 1\n```\n\n```python no-run\nslow()\n```\n```bash\nls\n```\n```python\ny = x\n```\n"
    blocks = python_blocks(text, "f.md")
    assert [b["where"] for b in blocks] == ["f.md:3", "f.md:13"]
    assert blocks[0]["code"].strip() == "x = 1" and blocks[0]["code"].count("\n") == 3


def test_the_reading_order_is_the_readmes():
    assert DOCS[:5] == ["README.md", "docs/guide.md", "docs/privacy.md", "docs/ARCHITECTURE.md", "docs/audit.md"]
    assert sorted(DOCS[5:]) == DOCS[5:] and len(DOCS) == len(set(DOCS))


def test_every_python_block_runs_as_written_in_reading_order_in_one_folder(tmp_path, data_dir, capsys, monkeypatch):
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2", "TFPRIV_DATA_DIR": str(data_dir.resolve())}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TFPRIV_DATA_DIR", env["TFPRIV_DATA_DIR"])
    ran = []
    for name in DOCS:
        blocks = python_blocks(open(os.path.join(REPO, name)).read(), name)
        if not blocks:
            continue
        runs, setup = SETUP.get(name, ([], ""))
        for args in runs:
            done = train_py(*args, capsys=capsys)
            assert done.returncode == 0, f"{name}: setup train.py {args}:\n{done.stderr[-3000:]}"
        spec = tmp_path / f"blocks-{len(ran)}.json"
        spec.write_text(json.dumps({"setup": setup, "blocks": blocks}))
        done = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], cwd=tmp_path, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, f"after {ran}, {name}:\n{done.stderr[-5000:]}"
        ran.append(name)
    assert ran[:2] == ["README.md", "docs/guide.md"]
