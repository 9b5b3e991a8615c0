"""The walk of ``learngene expand``'s arguments through the code: how often it returns to a module it already left.

Usage::

    python tools/call_walk.py [--depth N] [--list] [-- EXTRA_EXPAND_FLAGS...]

It makes a tiny ancestry and its ``pretrained`` gene in a temporary folder (no download, no training), then runs
``learngene expand GENE --depth N --out OUT [EXTRA...]`` in this process, through ``learngene.cli.main``, under
:func:`sys.setprofile`, and prints three figures of the walk.

The rule:

- A **step** is a Python-level call (a ``call`` event; C functions are not steps) into a function of a ``learngene``
  module made from the corridor the arguments travel: a function of ``learngene.cli`` or ``learngene.pipeline``
  (what the modules below do inside, e.g. a spec checking its fields, is theirs, not the walk's). It is recorded by
  the callee's module (``learngene.binding``), in the order the calls happen.
- The walk starts at ``main()`` and ends at the first call of ``learngene.descendant.build_descendant`` (the
  descendant's construction starts: what follows is building the model, not carrying the arguments).
- Left out, with every call beneath them: building the argument parser (``learngene.cli.parser.build_parser``: every
  command's flags, not this command's arguments) and module bodies run by an import (``<module>``). Comprehensions
  (``<listcomp>``, ``<dictcomp>``, ``<setcomp>``, ``<genexpr>``) are no steps: they are code of the function they sit
  in (Python 3.12 inlines most of them), so a call they make counts as that function's.
- Consecutive steps in one module are collapsed into one **stay**. A stay in a module that an earlier, non-adjacent
  stay was already in is a **return to a module already left**; ``returns`` counts them.

It prints ``stays S``, ``modules M`` and ``returns R`` (``--list`` also prints the stays, one module a line, a return
marked ``*``; ``--steps`` prints every step as ``module:function`` instead, to see which call makes a return). The figure depends only on the code's call structure, not on the machine's speed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

STOP = ("learngene.descendant", "build_descendant")  # where the argument path ends: the model's construction
COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
SKIP = {("learngene.cli.parser", "build_parser")}  # left out with everything beneath: the parser of every command
CORRIDOR = ("learngene.cli", "learngene.pipeline")  # the packages whose calls are the walk's steps


def make_gene(folder: Path) -> Path:
    """A tiny ancestry (2 layers, width 32, 16 px grey images), saved, and its ``pretrained`` gene, saved."""
    import torch

    import learngene as lg
    from learngene.formats.model_file import save_model
    from learngene.vit.spec import ViTSpec

    spec = ViTSpec(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4, in_chans=1, num_classes=10)
    torch.manual_seed(0)
    ancestry = folder / "ancestry.safetensors"
    save_model(ancestry, spec.create_model(), spec, origin={"kind": "ancestry", "license": "MIT"})
    gene = folder / "gene.safetensors"
    lg.condense("pretrained", str(ancestry)).save(gene)
    return gene


def record(argv: list[str], functions: bool = False) -> list[str]:
    """The modules of the walk's steps (see the module's docstring), running ``learngene`` with ``argv``;
    ``functions``: each as ``module:function`` instead (every step then listed, none collapsed)."""
    from learngene.cli import main

    steps: list[str] = []
    state: dict[str, Any] = {"depth": 0, "skip": None, "done": False}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if state["skip"] == state["depth"]:
                state["skip"] = None
            state["depth"] -= 1
            return
        if event != "call":
            return
        state["depth"] += 1
        if state["done"] or state["skip"] is not None:
            return
        module, name = frame.f_globals.get("__name__", ""), frame.f_code.co_name
        if (module, name) == STOP:
            state["done"] = True
        elif name == "<module>" or (module, name) in SKIP:
            state["skip"] = state["depth"]
        elif module.startswith("learngene") and name not in COMPREHENSIONS and _caller(frame).startswith(CORRIDOR):
            steps.append(f"{module}:{name}" if functions else module)

    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    finally:
        sys.setprofile(None)
    if code != 0 or not state["done"]:
        raise SystemExit(f"learngene {' '.join(argv)} did not reach the descendant's construction (exit {code})")
    return steps


def _caller(frame: FrameType) -> str:
    """The module of the function that made the call ``frame`` runs (a comprehension's: the function it sits in)."""
    return frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""


def stays(steps: list[str]) -> list[tuple[str, bool]]:
    """Consecutive steps in one module collapsed into one stay: ``(module, whether it returns to one left)``."""
    out: list[tuple[str, bool]] = []
    for module in steps:
        if out and out[-1][0] == module:
            continue
        out.append((module, any(m == module for m, _ in out)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="How often expand's argument path returns to a module it left.")
    parser.add_argument("--depth", type=int, default=1, help="the descendant's depth (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="print the stays too")
    parser.add_argument("--steps", action="store_true", help="print every step as module:function, then stop")
    parser.add_argument("extra", nargs="*", help="more flags of learngene expand (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        gene = make_gene(Path(tmp))
        argv = ["expand", str(gene), "--depth", str(args.depth), "--out", f"{tmp}/d", *args.extra]
        if args.steps:
            print("\n".join(record(argv, functions=True)))
            return 0
        walk = stays(record(argv))
    if args.list:
        for module, back in walk:
            print(f"{'*' if back else ' '} {module}")
    print(f"stays {len(walk)}")
    print(f"modules {len({m for m, _ in walk})}")
    print(f"returns {sum(back for _, back in walk)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
