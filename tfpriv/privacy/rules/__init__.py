"""Per-layer rules for per-example gradient norms and clipped sums without per-example gradients.

One file per rule. Bilinear (a row's kernel gradient is sum_t U_t ⊗ V_t, so norms come as ghost
norms or directly, sums by book-keeping): `dense.py`, `einsum_dense.py` (also MultiHeadAttention's
parts), `conv1d.py`, `conv2d.py`, `conv2d_transpose.py`, `recurrent.py` (LSTM and GRU: the
positions are the time steps, and W and U are one stacked kernel). Row-sparse (a row's table gradient is
sum_t e_{id_t} ⊗ g_t): `embedding.py`. Per-example gradients in closed form (small variables):
`layer_normalization.py`, `group_normalization.py`, `depthwise_conv2d.py`, `separable_conv2d.py`.
Any other layer: `layer_fallback.py` (per-example gradients of that layer alone by a vectorised
local VJP). The contract is `base.py`. Adding a rule is one file plus its test
(tests/privacy/rules/), then `register(rule)`.
"""
from __future__ import annotations

from tfpriv.privacy.rules.base import FactorRule, Layer, LayerRule, PerExampleRule, RowSparseRule, Tap
from tfpriv.privacy.rules.conv1d import Conv1DRule
from tfpriv.privacy.rules.conv2d import Conv2DRule
from tfpriv.privacy.rules.conv2d_transpose import Conv2DTransposeRule
from tfpriv.privacy.rules.dense import DenseRule
from tfpriv.privacy.rules.depthwise_conv2d import DepthwiseConv2DRule
from tfpriv.privacy.rules.einsum_dense import EinsumDenseRule
from tfpriv.privacy.rules.embedding import EmbeddingRule
from tfpriv.privacy.rules.group_normalization import GroupNormalizationRule
from tfpriv.privacy.rules.layer_fallback import PerLayerFallback
from tfpriv.privacy.rules.layer_normalization import LayerNormalizationRule
from tfpriv.privacy.rules.recurrent import GRURule, LSTMRule, RecurrentRule
from tfpriv.privacy.rules.separable_conv2d import SeparableConv2DRule
from tfpriv.registry import Registry


def _built_ins() -> Registry[LayerRule]:
    """The built-in rules by name, in the order `rule_for` tries them."""
    registry: Registry[LayerRule] = Registry("layer rule", parameter="rule")
    for rule in (DenseRule(), Conv2DRule(), Conv2DTransposeRule(), EmbeddingRule(), Conv1DRule(),
                 LayerNormalizationRule(), GroupNormalizationRule(), EinsumDenseRule(), DepthwiseConv2DRule(),
                 SeparableConv2DRule(), LSTMRule(), GRURule()):
        registry.register(rule.name, rule)
    return registry


REGISTRY = _built_ins()
FALLBACK = PerLayerFallback()


def rule_for(layer: Layer) -> LayerRule:
    """The first registered rule that supports `layer`, or the per-layer fallback."""
    for rule in REGISTRY.values():
        if rule.supports(layer):
            return rule
    return FALLBACK


def register(rule: LayerRule) -> LayerRule:
    """Adds a rule ahead of the built-in ones (for user layers), under its `name`, and returns it.

    A name already taken by another rule is a ValueError (`tfpriv.registry.Registry.register`):
    a user's rule is named apart from the built-in ones (`REGISTRY.names()`).

    Example:
        A user layer that computes like Dense reuses Dense's ghost-norm rule:

            from tfpriv.privacy import register
            from tfpriv.privacy.rules import DenseRule

            class ScaledDenseRule(DenseRule):
                name = "scaled_dense"

                def supports(self, layer):
                    return isinstance(layer, ScaledDense)   # the user's Dense subclass

            register(ScaledDenseRule())
    """
    return REGISTRY.register(rule.name, rule, first=True)


__all__ = ["Conv1DRule", "Conv2DRule", "Conv2DTransposeRule", "DenseRule", "DepthwiseConv2DRule", "EinsumDenseRule",
           "EmbeddingRule", "FALLBACK", "FactorRule", "GRURule", "GroupNormalizationRule", "LSTMRule",
           "LayerNormalizationRule", "LayerRule", "PerExampleRule", "PerLayerFallback", "REGISTRY", "RecurrentRule",
           "RowSparseRule", "SeparableConv2DRule", "Tap", "register", "rule_for"]
