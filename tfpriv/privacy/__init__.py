"""The DP engine: loss terms in, privatized gradients out, RDP accounting.

    from tfpriv.privacy import DPConfig, DPGradientEngine, LossTerms, TermSpec
"""
from tfpriv.privacy.accounting import PrivacyLedger, calibrate_noise, epsilon_for, max_steps_within
from tfpriv.privacy.config import AGGREGATIONS, DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rules import LayerRule, register
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

__all__ = [
    "AGGREGATIONS", "BatchLayout", "DPConfig", "DPGradientEngine", "LayerRule", "LossTerms",
    "PrivacyLedger", "TermSpec", "calibrate_noise", "epsilon_for", "max_steps_within", "register",
]
