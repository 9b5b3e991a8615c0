"""Every method, one module per paper or baseline family; importing this package registers them all."""

from . import baselines, cluster, front, growth, importance, mimetic, peg, tleg, wave, weight_selection  # noqa: F401
