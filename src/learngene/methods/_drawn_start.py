"""What TLEG, SWS and WAVE share (:class:`~learngene.training.auxnet.DrawnStartConfig`): a gene of block tensors drawn at the
start of condensation and trained in an aux net, beside the aux net's embeddings, final norm and head as timm draws
them; a descendant gets its blocks by the method's rule and those by :func:`~learngene.training.auxnet.expand_non_block`."""

from __future__ import annotations

from ..gene import Learngene
from ..training.auxnet import AuxNetMethod, expand_non_block, initial_non_block
from ..vit.spec import ViTSpec
from ..vit.transfer import StateDict


class DrawnStartMethod(AuxNetMethod):
    """An aux-net method whose gene starts as drawn block tensors: a subclass says how they start
    (:meth:`initial_blocks`) and how a descendant's blocks are made from them (:meth:`expand_blocks`)."""

    def initial_blocks(self, aux: ViTSpec) -> StateDict:
        """The gene's block tensors at the start of condensation, for the aux net ``aux``."""
        raise NotImplementedError

    def expand_blocks(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        """``spec``'s block tensors (timm keys) from the gene's."""
        raise NotImplementedError

    def initial_tensors(self, aux: ViTSpec) -> StateDict:
        tensors = self.initial_blocks(aux)
        tensors.update(initial_non_block(aux))  # drawn after the blocks, from the same global RNG
        return tensors

    def expand(self, gene: Learngene, spec: ViTSpec) -> StateDict:
        out = self.expand_blocks(gene, spec)
        out.update(expand_non_block(gene, spec))
        return out
