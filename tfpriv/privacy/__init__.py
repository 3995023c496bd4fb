"""The DP engine: loss terms in, privatized gradients out, RDP or PLD accounting.

    from tfpriv.privacy import DPConfig, DPGradientEngine, LossTerms, TermSpec
"""
from tfpriv.privacy.accounting import Accountant, PrivacyLedger, get_accountant
from tfpriv.privacy.config import AGGREGATIONS, DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.rules import LayerRule, register
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

__all__ = [
    "AGGREGATIONS", "Accountant", "BatchLayout", "DPConfig", "DPGradientEngine", "LayerRule", "LossTerms",
    "PrivacyLedger", "TermSpec", "get_accountant", "register",
]
