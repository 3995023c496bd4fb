"""What DPImageBench's DPDM recipe would cost on this machine (issue #36's diffusion lever).

Counts the multiply-adds of the source's denoiser (`models/DP_Diffusion/model/ncsnpp.py`, NCSNpp with
BigGAN residual blocks, built from `configs/DPDM/mnist_28_eps1.0.yaml`: nf 32, ch_mult (2, 2), 2 blocks
per level, attention at 14x14) from its architecture loop, then measures what this machine sustains on
the network's dominant operation (a 3x3 convolution, 64 -> 64 channels at 28x28, forward and backward in
TensorFlow) and divides. Only convolutions, 1x1 projections and attention products are counted (no
normalisation, activation, embedding or per-example-gradient overhead), so every time printed is a lower
bound.

    python experiments/frontier/diffusion_cost.py [--batch=128] [--repeats=7]
"""
from __future__ import annotations

import argparse
import statistics
import time


def conv(hw: int, cin: int, cout: int, k: int = 3) -> float:
    """FLOPs (2 per multiply-add) of a k x k convolution on an hw x hw map."""
    return 2.0 * hw * hw * cin * cout * k * k


def resblock(hw: int, cin: int, cout: int, resample: str | None = None) -> float:
    """ResnetBlockBigGAN: Conv_0 (cin -> cout), Conv_1 (cout -> cout) at the output resolution, and a 1x1
    skip when the channel count changes. `hw` is the input resolution."""
    out = hw // 2 if resample == "down" else hw * 2 if resample == "up" else hw
    flops = conv(out, cin, cout) + conv(out, cout, cout)
    if cin != cout:
        flops += conv(out, cin, cout, k=1)
    return flops


def attention(hw: int, ch: int) -> float:
    """AttnBlockpp: q, k, v and output 1x1 projections plus the two (hw^2 x hw^2 x ch) products."""
    return 4 * conv(hw, ch, ch, k=1) + 2 * 2.0 * (hw * hw) ** 2 * ch


def ncsnpp_forward_flops(image_size: int = 28, channels: int = 1, nf: int = 32, ch_mult: tuple = (2, 2),
                         num_res_blocks: int = 2, attn_resolutions: tuple = (14,)) -> float:
    """One forward pass, following NCSNpp.__init__'s module loop (progressive 'none', resblock 'biggan')."""
    resolutions = [image_size // 2 ** i for i in range(len(ch_mult))]
    flops = conv(image_size, channels, nf)
    hs_c, in_ch = [nf], nf
    for level, hw in enumerate(resolutions):
        for _ in range(num_res_blocks):
            out_ch = nf * ch_mult[level]
            flops += resblock(hw, in_ch, out_ch)
            in_ch = out_ch
            if hw in attn_resolutions:
                flops += attention(hw, in_ch)
            hs_c.append(in_ch)
        if level != len(resolutions) - 1:
            flops += resblock(hw, in_ch, in_ch, "down")
            hs_c.append(in_ch)
    hw = resolutions[-1]
    flops += 2 * resblock(hw, in_ch, in_ch) + attention(hw, in_ch)
    for level in reversed(range(len(resolutions))):
        hw = resolutions[level]
        for _ in range(num_res_blocks + 1):
            out_ch = nf * ch_mult[level]
            flops += resblock(hw, in_ch + hs_c.pop(), out_ch)
            in_ch = out_ch
        if hw in attn_resolutions:
            flops += attention(hw, in_ch)
        if level != 0:
            flops += resblock(hw, in_ch, in_ch, "up")
    assert not hs_c
    return flops + conv(image_size, in_ch, channels)


def measured_flops_per_second(batch: int, repeats: int) -> tuple[float, float, float]:
    """Median, min and max FLOP/s of a 3x3 64 -> 64 convolution at 28x28, forward + backward (3x forward)."""
    import tensorflow as tf
    from tfpriv.compat import keras

    layer = keras.layers.Conv2D(64, 3, padding="same")
    x = tf.random.normal([batch, 28, 28, 64])
    layer.build(x.shape)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(layer(x))
        return tape.gradient(y, [x, *layer.trainable_variables])

    step(x)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(5):
            grads = step(x)
        _ = grads[0].numpy()
        rates.append(5 * 3 * batch * conv(28, 64, 64) / (time.perf_counter() - start))
    return statistics.median(rates), min(rates), max(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    forward = ncsnpp_forward_flops()
    # configs/DPDM/mnist_28_eps1.0.yaml: 150 epochs of the 55,000 training images (5,000 held out for
    # selection), 32 noise draws per example (n_noise_samples), and for the accuracy evaluation 60,000
    # samples from the EDM sampler at 1,000 steps (Heun: 2 evaluations a step but the last).
    draws = 150 * 55_000 * 32
    train = draws * 3 * forward
    sample = 60_000 * (2 * 1000 - 1) * forward
    rate, low, high = measured_flops_per_second(args.batch, args.repeats)
    day = 86_400.0
    print(f"NCSNpp forward: {forward / 1e9:.2f} GFLOP per image")
    print(f"this machine, 3x3 conv 64->64 at 28x28, fwd+bwd, batch {args.batch}: "
          f"{rate / 1e9:.1f} GFLOP/s (min {low / 1e9:.1f}, max {high / 1e9:.1f}, {args.repeats} repeats)")
    print(f"training: {draws:.3g} example-draws x 3 x forward = {train:.3g} FLOP -> >= {train / rate / day:.0f} days")
    print(f"sampling 60,000 images: {sample:.3g} FLOP -> >= {sample / rate / day:.0f} days")
    print(f"one draw per example instead of 32: >= {train / 32 / rate / day:.1f} days of training")


if __name__ == "__main__":
    main()
