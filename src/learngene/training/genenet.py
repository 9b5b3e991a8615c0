"""A timm ViT whose weights are a learngene expanded on every forward, so gradients reach the gene.

This is how TLEG/WAVE/Share-Init condense (train the gene through an aux net, :mod:`learngene.training.auxnet`)
and how WAVE's scalers and PEG's φ adapt (train some gene tensors on downstream data). It takes the
method object it expands with, so it needs no registry: methods import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torch import Tensor, nn
from torch.func import functional_call

from ..gene import Learngene
from ..method import Method
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict


class GeneNet(nn.Module):
    """A timm ViT of ``spec`` whose provided parameters are ``method.expand(gene, spec)`` on every forward.

    Gradients flow into the gene's tensors (those selected by ``trainable``); keys the method does not
    provide are the skeleton's own ordinary parameters (trained too, e.g. a new classifier head).
    Every weight is materialized once per forward, then the stock timm forward runs on it. The
    training loop checks data against ``skeleton`` (see :func:`learngene.training.loop.check_data_fits`).
    """

    def __init__(self, method: Method, gene: Learngene, spec: ViTSpec, trainable: Callable[[str], bool] | None = None):
        super().__init__()
        self.method, self.spec = method, spec
        self._meta = dataclasses.replace(gene, tensors={})
        self.gene_tensors = nn.ParameterDict(
            {
                _param_name(k): nn.Parameter(v.detach().clone(), requires_grad=trainable(k) if trainable else True)
                for k, v in gene.tensors.items()
            }
        )
        self.skeleton = spec.create_model()
        provided = set(method.provided_keys(gene, spec))
        for name, p in self.skeleton.named_parameters():
            if name in provided:
                p.requires_grad_(False)

    def gene(self) -> Learngene:
        """The current gene (tensors detached)."""
        return dataclasses.replace(
            self._meta, tensors={k: p.detach().cpu().clone() for k, p in self._tensors().items()}
        )

    def _tensors(self) -> StateDict:
        return {_key_name(k): p for k, p in self.gene_tensors.items()}

    def expanded(self) -> StateDict:
        """The gene expanded to this model's spec: timm state_dict entries, differentiable in the gene."""
        expanded = self.method.expand(dataclasses.replace(self._meta, tensors=self._tensors()), self.spec)
        return self.spec.join_layers(expanded, self.skeleton.state_dict())

    def forward(self, x: Tensor) -> Tensor:
        """The timm ViT's forward with the weights the gene expands to."""
        return functional_call(self.skeleton, self.expanded(), (x,), strict=False)

    def no_weight_decay(self) -> set[str]:
        """Parameter names AdamW leaves without weight decay (timm's rule for the gene's tensors)."""
        return {f"skeleton.{k}" for k in getattr(self.skeleton, "no_weight_decay", lambda: set())()}


def _param_name(key: str) -> str:
    return key.replace(".", "::")  # nn.ParameterDict keys may not contain dots


def _key_name(param: str) -> str:
    return param.replace("::", ".")
