"""One figure per study instead of one PNG per run: the images side by side, each under its name.

    python experiments/tools/montage.py OUT.png IMAGE.png [IMAGE.png ...] [--columns=N]

Each panel is an input image unscaled, titled with its file name without `.png` (the name the study
README cites it by: "panel `pinwheel_kl_seed2` of figures.png"); panels fill rows of N columns
(default: the square root of their number, rounded up), each cell as large as the largest image.
"""
from __future__ import annotations

import math
import os
import sys

from PIL import Image, ImageDraw

TITLE_HEIGHT = 16
MARGIN = 6


def montage(out: str, paths: list[str], columns: int | None = None) -> tuple[int, int]:
    """Writes the figure to `out`; returns its (width, height)."""
    if not paths:
        raise SystemExit("montage: no image given")
    images = [Image.open(p).convert("RGB") for p in paths]
    columns = columns or math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / columns)
    cell_w = max(im.width for im in images) + MARGIN
    cell_h = max(im.height for im in images) + TITLE_HEIGHT + MARGIN
    figure = Image.new("RGB", (columns * cell_w, rows * cell_h), "white")
    draw = ImageDraw.Draw(figure)
    for i, (path, im) in enumerate(zip(paths, images)):
        x, y = (i % columns) * cell_w, (i // columns) * cell_h
        draw.text((x + 2, y + 2), os.path.basename(path)[: -len(".png")], fill="black")
        figure.paste(im, (x, y + TITLE_HEIGHT))
    figure.save(out, optimize=True)
    return figure.size


def main(argv: list[str]) -> None:
    columns = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--columns=")]
    paths = [a for a in argv if not a.startswith("--columns=")]
    if len(paths) < 2:
        raise SystemExit(__doc__)
    print(paths[0], montage(paths[0], paths[1:], columns[0] if columns else None))


if __name__ == "__main__":
    main(sys.argv[1:])
