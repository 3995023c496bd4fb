"""The reference for `bench/make_private_models.py`: the same three models in PyTorch, private with
Opacus' `PrivacyEngine.make_private` (Poisson sampling, C = 1, z = 1) against the plain training loop,
same B, shapes and rounds, examples/s median and IQR over interleaved rounds.

Runs in its own environment (`requirements-bench.txt`: CPU torch and opacus, never in the
TensorFlow environments). `nn.LSTM` and `nn.MultiheadAttention` become Opacus' `DPLSTM` and
`DPMultiheadAttention` through `ModuleValidator.fix`, as an Opacus user would do.

    /work/envs/bench/bin/python bench/opacus_models.py [--batch_size=256] [--steps=20] [--rounds=3]
        [--only=convnet,lstm] [--threads=2] [--out=experiments/throughput/make_private_models.jsonl]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench.model_sizes import SIZES  # noqa: E402
from bench.rounds import interleaved, load_average, print_row, summary  # noqa: E402


class ConvNet(nn.Module):
    """Conv2d(16, 3, /2) -> Conv2d(32, 3, /2) -> Linear(10), as `make_private_models.convnet`."""

    def __init__(self, s: dict):
        super().__init__()
        side = (((s["image"] - 3) // 2 + 1) - 3) // 2 + 1
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(32 * side * side, 10))

    def forward(self, x):
        return self.net(x)


class LSTMClassifier(nn.Module):
    """Embedding(vocab, width) -> LSTM(width) -> Linear(2) on the last state."""

    def __init__(self, s: dict):
        super().__init__()
        self.embedding = nn.Embedding(s["vocab"], s["width"])
        self.lstm = nn.LSTM(s["width"], s["width"], batch_first=True)
        self.out = nn.Linear(s["width"], 2)

    def forward(self, tokens):
        h, _ = self.lstm(self.embedding(tokens))
        return self.out(h[:, -1])  # GRUClassifier's GRU also returns (outputs, state)


class Block(nn.Module):
    """Post-norm encoder block: self-attention and an FFN of 2 * width, each with residual + LayerNorm."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))

    def forward(self, h):
        h = self.norm1(h + self.attention(h, h, h, need_weights=False)[0])
        return self.norm2(h + self.ffn(h))


class Transformer(nn.Module):
    """Embedding + sinusoidal positions -> 2 blocks -> mean over positions -> Linear(2)."""

    def __init__(self, s: dict, blocks: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(s["vocab"], s["width"])
        pos, i = np.arange(s["length"])[:, None], np.arange(s["width"])[None, :]
        angle = pos / np.power(10_000.0, (2 * (i // 2)) / s["width"])
        self.register_buffer("positions", torch.tensor(np.where(i % 2 == 0, np.sin(angle), np.cos(angle)),
                                                       dtype=torch.float32))
        self.blocks = nn.Sequential(*[Block(s["width"], s["heads"]) for _ in range(blocks)])
        self.out = nn.Linear(s["width"], 2)

    def forward(self, tokens):
        return self.out(self.blocks(self.embedding(tokens) + self.positions).mean(dim=1))


class GRUClassifier(LSTMClassifier):
    """Embedding(vocab, width) -> GRU(width) -> Linear(2) on the last state."""

    def __init__(self, s: dict):
        super().__init__(s)
        self.lstm = nn.GRU(s["width"], s["width"], batch_first=True)


MODELS = {"convnet": ConvNet, "lstm": LSTMClassifier, "gru": GRUClassifier, "transformer": Transformer}


def data(model: str, n: int, s: dict, seed: int = 0):
    rng = np.random.default_rng(seed)
    if model == "convnet":
        x = torch.tensor(rng.random((n, 1, s["image"], s["image"]), dtype=np.float32))
        return x, torch.tensor(rng.integers(0, 10, n))
    return torch.tensor(rng.integers(0, s["vocab"], (n, s["length"]))), torch.tensor(rng.integers(0, 2, n))


def fits(name: str, s: dict, b: int, steps: int) -> dict:
    """{"private": one epoch, "non-private": one epoch}, each run once untimed first."""
    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator
    n = b * steps
    dataset = torch.utils.data.TensorDataset(*data(name, n, s))
    loss = nn.CrossEntropyLoss()

    def model():
        torch.manual_seed(0)
        return ModuleValidator.fix(MODELS[name](s))  # LSTM/GRU -> DPLSTM/DPGRU, MultiheadAttention -> DP...

    private_model = model()
    optimizer = torch.optim.Adam(private_model.parameters())
    private_model, optimizer, private_loader = PrivacyEngine(accountant="rdp").make_private(
        module=private_model, optimizer=optimizer, data_loader=torch.utils.data.DataLoader(dataset, batch_size=b),
        noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
    plain_model = model()
    plain_optimizer = torch.optim.Adam(plain_model.parameters())
    plain_loader = torch.utils.data.DataLoader(dataset, batch_size=b)

    def epoch(net, opt, loader) -> int:
        net.train()
        for x, y in loader:
            opt.zero_grad()
            loss(net(x), y).backward()
            opt.step()
        return n  # Poisson batches: N examples in expectation

    runs = {"private": lambda: epoch(private_model, optimizer, private_loader),
            "non-private": lambda: epoch(plain_model, plain_optimizer, plain_loader)}
    for run in runs.values():
        run()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="experiments/throughput/make_private_models.jsonl")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads (as make_private_models.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    warnings.filterwarnings("ignore")  # Opacus' secure-RNG and full-backward-hook notices
    import opacus
    header = {"command": "python bench/opacus_models.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
              "opacus": opacus.__version__, "threads": torch.get_num_threads(), "batch_size": args.batch_size,
              "steps": args.steps, "sizes": SIZES}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for name in [m for m in args.only.split(",") if m] or list(MODELS):
        start = load_average()
        rates = interleaved(fits(name, SIZES, args.batch_size, args.steps), args.rounds)
        row = summary("opacus", name, rates["private"], rates["non-private"], **header,
                      load_average_start=start, load_average_end=load_average())
        print_row(row)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
