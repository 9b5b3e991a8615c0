"""Every method, one module per paper or baseline family; importing this package registers them all."""

from . import (  # noqa: F401
    baselines,
    cluster,
    front,
    growth,
    importance,
    lets,
    mimetic,
    peg,
    structured,
    sws,
    tleg,
    wave,
    weight_selection,
)
