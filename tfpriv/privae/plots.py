"""PNG figures of trained VAEs (matplotlib, Agg backend)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def image_grid(images: np.ndarray, path: str, rows: int | None = None, title: str | None = None) -> str:
    """Saves images [n, H, W, C] in [0, 1] as one grid PNG: the images tiled into one array, drawn
    once (one matplotlib axes per image took seconds per grid, a large part of a short run)."""
    n, h, w, c = images.shape
    cols = int(np.ceil(np.sqrt(n))) if rows is None else int(np.ceil(n / rows))
    rows = int(np.ceil(n / cols))
    gap = max(1, h // 8)  # white lines between the images, as the figure's background showed
    canvas = np.ones((rows * (h + gap) - gap, cols * (w + gap) - gap, c), np.float32)
    for k in range(n):
        r, q = divmod(k, cols)
        canvas[r * (h + gap):r * (h + gap) + h, q * (w + gap):q * (w + gap) + w] = images[k]
    height = rows * 0.8 + (0.3 if title else 0)
    fig = plt.figure(figsize=(cols * 0.8, height))
    ax = fig.add_axes((0, 0, 1, rows * 0.8 / height))
    ax.imshow(canvas[..., 0] if c == 1 else canvas, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def pinwheel_figure(x: np.ndarray, recon: np.ndarray, codes: np.ndarray, path: str, title: str = "",
                    prior_means: np.ndarray | None = None) -> str:
    """The term-wise paper's Fig. 2 layout: data (red) and reconstructions (yellow); latents (blue)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 4))
    a.scatter(x[:, 0], x[:, 1], s=6, c="red", label="data")
    a.scatter(recon[:, 0], recon[:, 1], s=6, c="gold", label="reconstruction")
    a.set_title("data space")
    a.legend(loc="best", fontsize=7)
    b.scatter(codes[:, 0], codes[:, 1], s=6, c="tab:blue", label="latent codes")
    if prior_means is not None:
        b.scatter(prior_means[:, 0], prior_means[:, 1], s=60, marker="x", c="k", label="prior means")
    b.set_title("latent space")
    b.legend(loc="best", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
