"""PNG figures (matplotlib Agg): accuracy vs budget, t-SNE latent geometry, decoded image grids."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.manifold import TSNE  # noqa: E402


def plot_budget_curves(sweep: list[dict], path: str, roles=("private", "utility", "nontarget"), title: str = "") -> None:
    """sweep: [{budget, filter: {role_accuracy: {mean, std}}, gaussian: {...}}]; symlog x axis (budget 0 allowed)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    budgets = [s["budget"] for s in sweep]
    colors = {"private": "tab:red", "utility": "tab:blue", "nontarget": "tab:green"}
    for method, style in (("filter", "-o"), ("gaussian", "--s"), ("gaussian_cov", ":^")):
        for role in roles:
            key = f"{role}_accuracy"
            if method not in sweep[0] or key not in sweep[0][method]:
                continue
            mean = [s[method][key]["mean"] for s in sweep]
            std = [s[method][key]["std"] for s in sweep]
            label = {"filter": "filter", "gaussian": "Gaussian (isotropic)", "gaussian_cov": "Gaussian (Σ-shaped)"}[method]
            ax.errorbar(budgets, mean, yerr=std, fmt=style, color=colors[role], capsize=3,
                        label=f"{label} {role}")
    ax.set_xscale("symlog", linthresh=min([b for b in budgets if b > 0] or [1e-2]))
    ax.set_xlabel("distortion budget b")
    ax.set_ylabel("test accuracy (fresh classifier)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_tsne(raw: np.ndarray, filtered: np.ndarray, private: np.ndarray, utility: np.ndarray, path: str,
              max_points: int = 2000, seed: int = 0) -> None:
    """2x2 t-SNE panels: raw / filtered codes coloured by private and by utility label."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(raw), min(max_points, len(raw)), replace=False)
    fig, axes = plt.subplots(2, 2, figsize=(9, 8))
    for row, (name, codes) in enumerate((("raw", raw), ("filtered", filtered))):
        emb = TSNE(2, init="pca", random_state=seed, perplexity=30).fit_transform(codes[idx])
        for col, (lname, lab) in enumerate((("private", private), ("utility", utility))):
            ax = axes[row, col]
            sc = ax.scatter(emb[:, 0], emb[:, 1], c=lab[idx], s=3, cmap="tab10")
            ax.set_title(f"{name} codes, coloured by {lname} label", fontsize=9)
            ax.set_xticks([]), ax.set_yticks([])
            fig.colorbar(sc, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_image_grid(rows: list[tuple[str, np.ndarray]], path: str) -> None:
    """One row of images per (name, images [n, H, W, C]) pair."""
    n = min(len(imgs) for _, imgs in rows)
    fig, axes = plt.subplots(len(rows), n, figsize=(n * 0.9, len(rows) * 1.0))
    for r, (name, imgs) in enumerate(rows):
        for c in range(n):
            ax = axes[r, c]
            img = np.clip(imgs[c], 0, 1)
            ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
        axes[r, 0].set_ylabel(name, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
