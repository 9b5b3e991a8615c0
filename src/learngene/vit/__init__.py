"""Describing a ViT and moving its tensors between sizes: the spec, timm's tensor tables, the transfer rules."""
