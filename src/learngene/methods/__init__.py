"""Every method, registered by importing its module (one module per paper or baseline family)."""

from . import baselines, cluster, front, growth, importance, mimetic, peg, tleg, wave, weight_selection  # noqa: F401
from .base import Ancestry, CondenseInputs, GeneNet, Method, make_descendant

__all__ = ["Ancestry", "CondenseInputs", "GeneNet", "Method", "make_descendant"]
