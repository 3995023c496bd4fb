"""experiments/tools/montage.py: a study's images become one figure, each panel unscaled under its name."""
from PIL import Image

from experiments.tools import montage


def test_every_image_is_a_panel_at_its_own_size(tmp_path):
    colours = {"a": (255, 0, 0), "b": (0, 255, 0), "c": (0, 0, 255)}
    paths = []
    for name, colour in colours.items():
        paths.append(str(tmp_path / f"{name}.png"))
        Image.new("RGB", (20, 10), colour).save(paths[-1])
    out = tmp_path / "figure.png"

    width, height = montage.montage(str(out), paths, columns=2)

    cell_w, cell_h = 20 + montage.MARGIN, 10 + montage.TITLE_HEIGHT + montage.MARGIN
    assert (width, height) == (2 * cell_w, 2 * cell_h)
    figure = Image.open(out).convert("RGB")
    for i, colour in enumerate(colours.values()):  # each image pasted whole below its title strip
        x, y = (i % 2) * cell_w, (i // 2) * cell_h + montage.TITLE_HEIGHT
        assert figure.getpixel((x, y)) == colour and figure.getpixel((x + 19, y + 9)) == colour
