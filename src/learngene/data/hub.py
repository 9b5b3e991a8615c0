"""Hugging Face ``datasets`` as a data source: ``--data hf:NAME_OR_PATH[:SPLIT][,image=COLUMN][,label=COLUMN]``.

``NAME_OR_PATH`` is a folder written by ``DatasetDict.save_to_disk`` or a dataset's name on the Hub, read by
``datasets.load_dataset`` from its cache (``HF_HUB_OFFLINE=1`` keeps it there). Training reads the ``train`` split;
evaluation ``SPLIT`` when given, else ``test``, else ``validation``. The image column is the one of the ``Image``
feature and the label column the one of the ``ClassLabel`` feature (else a column named ``label``) unless
``image=`` / ``label=`` name them. Images stream as an image folder's do (:class:`~learngene.data.folder.FolderData`:
the model's preprocessing, ``--aug deit``, DataLoader workers), so ``--train-images``, ``--few-shot`` and the label
space (the dataset's class names) follow the same rules. Needs the optional ``datasets`` package
(``pip install 'learngene[datasets]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import DataError
from .folder import FolderData, default_preprocessing, is_colour, preprocessing_cfg
from .images import Data, colour_for_grey_model
from .sources import _first_line

COLUMN_OPTIONS = ("image", "label")
EVAL_SPLITS = ("test", "validation")


class HubImageData(FolderData):
    """The rows ``rows`` of a ``datasets.Dataset``, decoded one by one from its image column (as a folder's files)."""

    def __init__(
        self,
        table: Any,
        image_column: str,
        rows: Sequence[int],
        labels: Sequence[int],
        classes: Sequence[str],
        preprocessing: dict[str, Any],
        name: str,
        augment: str = "none",
        workers: int = 0,
    ):
        # a sample's "path" names the row in this version of the table (the run fingerprint digests them)
        samples = [(f"{table._fingerprint}/{row}", label) for row, label in zip(rows, labels)]
        super().__init__(samples, classes, preprocessing, name, augment, workers)
        self.table, self.image_column, self.rows = table, image_column, list(rows)

    def open_image(self, index: int, mode: str):
        try:
            image = self.table[self.rows[index]][self.image_column]
            return image.convert(mode)
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise DataError(
                f"{self.name}: row {self.rows[index]}'s {self.image_column!r} is not a readable image "
                f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}); fix or drop that row"
            ) from None

    def subset(self, indices: Sequence[int] | torch.Tensor, name: str | None = None) -> HubImageData:
        picked = [int(i) for i in torch.as_tensor(indices, dtype=torch.long)]
        return HubImageData(
            self.table,
            self.image_column,
            [self.rows[i] for i in picked],
            [self.samples[i][1] for i in picked],
            self.classes,
            self.preprocessing,
            name or self.name,
            self.augment,
            self.workers,
        )


def parse_argument(argument: str) -> tuple[str, str | None, dict[str, str]]:
    """``NAME_OR_PATH[:SPLIT][,image=COLUMN][,label=COLUMN]`` as (name or path, evaluation split, columns)."""
    target, *items = argument.split(",")
    columns: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in COLUMN_OPTIONS or not value.strip():
            raise DataError(
                f"hf:{argument}: {item!r} is not image=COLUMN or label=COLUMN; write e.g. hf:cifar100,label=fine_label"
            )
        columns[key.strip()] = value.strip()
    base, sep, split = target.rpartition(":")
    if sep and base and "/" not in split and not Path(target).exists():
        return base, split, columns
    return target, None, columns


def hf_source(argument: str, req: Any) -> Data:
    """The ``hf:`` data source (:func:`learngene.data.load_dataset` calls it with a ``LoadRequest``)."""
    target, eval_split, columns = parse_argument(argument)
    splits = _open(target)
    split = "train" if req.split == "train" else _eval_split(splits, eval_split, target)
    if split not in splits:
        raise DataError(f"hf:{target} has no {split!r} split (it has {', '.join(splits) or 'none'}); {_SPLITS_FIX}")
    table = splits[split]
    image_column, label_column = _columns(table, columns, target)
    labels, classes = _labels(table, label_column, req.classes, f"hf:{target} ({split})")
    in_chans = req.in_chans or 3
    if len(table) and in_chans == 1 and is_colour(table[0][image_column]):
        raise colour_for_grey_model(f"hf:{target}")
    pre = preprocessing_cfg(req.preprocessing or default_preprocessing(in_chans), req.img_size, in_chans)
    name = f"hf:{Path(target).name if Path(target).exists() else target}"
    augment = req.augment if req.split == "train" else "none"
    return HubImageData(table, image_column, range(len(table)), labels, classes, pre, name, augment, req.workers)


_SPLITS_FIX = "save a DatasetDict with a train and a test split, or name the evaluation split: hf:NAME_OR_PATH:SPLIT"


def _open(target: str) -> dict[str, Any]:
    """The dataset's splits by name: a ``save_to_disk`` folder, or a Hub dataset through ``datasets``' cache."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            "--data hf: needs the datasets package; install it with pip install 'learngene[datasets]'"
        ) from None
    if Path(target).exists():
        try:
            loaded = datasets.load_from_disk(target)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise DataError(
                f"hf:{target} is not a dataset saved by datasets' save_to_disk ({_first_line(exc)}); give such a "
                f"folder, or a dataset name on the Hub"
            ) from None
        if isinstance(loaded, datasets.Dataset):
            raise DataError(f"hf:{target} holds one split (a Dataset), not a DatasetDict; {_SPLITS_FIX}")
        return dict(loaded)
    try:
        return dict(datasets.load_dataset(target))
    except (ConnectionError, FileNotFoundError, OSError, ValueError) as exc:
        from datasets import config

        where = "HF_HUB_OFFLINE=1 keeps it off the network" if config.HF_HUB_OFFLINE else "the Hub cannot be reached"
        raise DataError(
            f"hf:{target} is neither a folder nor a dataset in the datasets cache {config.HF_DATASETS_CACHE} "
            f"({_first_line(exc)}), and {where}; where there is network, run "
            f"python -c \"import datasets; datasets.load_dataset('{target}').save_to_disk('DIR')\" and pass "
            f"--data hf:DIR"
        ) from None


def _eval_split(splits: dict[str, Any], named: str | None, target: str) -> str:
    if named is not None:
        return named
    found = next((s for s in EVAL_SPLITS if s in splits), None)
    if found is None:
        raise DataError(f"hf:{target} has no test or validation split (it has {', '.join(splits)}); {_SPLITS_FIX}")
    return found


def _columns(table: Any, named: dict[str, str], target: str) -> tuple[str, str]:
    """The image and label columns: those named, else the ``Image`` and ``ClassLabel`` features (or ``label``)."""
    import datasets

    features = table.features
    image = named.get("image") or next((k for k, f in features.items() if isinstance(f, datasets.Image)), None)
    label = named.get("label") or next((k for k, f in features.items() if isinstance(f, datasets.ClassLabel)), None)
    label = label or ("label" if "label" in features else None)
    for role, column in (("image", image), ("label", label)):
        if column is None or column not in features:
            raise DataError(
                f"hf:{target} has no {role} column {'named ' + repr(column) if column else 'learngene recognizes'} "
                f"(its columns: {', '.join(features)}); name it: hf:{target},{role}=COLUMN"
            )
    assert image is not None and label is not None
    return image, label


def _labels(table: Any, column: str, classes: Sequence[str] | None, shown: str) -> tuple[list[int], list[str]]:
    """Each row's class index and the class names: a ClassLabel's names, integers' own values, or the sorted
    distinct strings; ``classes`` (the train split's) must hold every label of this split."""
    import datasets

    feature = table.features[column]
    values = list(table[column])
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
        if classes is not None and list(classes) != names:
            raise DataError(f"{shown}: its classes differ from the train split's; give both splits one ClassLabel")
        return [int(v) for v in values], _at_least_two(names, shown)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if any(v < 0 for v in values):
            raise DataError(f"{shown}: label column {column!r} holds negative values; labels must be 0, 1, 2, ...")
        names = list(classes) if classes is not None else [str(i) for i in range(max(values, default=-1) + 1)]
        if values and max(values) >= len(names):
            raise DataError(f"{shown}: label {max(values)} is not a class of the train split ({len(names)} classes)")
        return values, _at_least_two(names, shown)
    if all(isinstance(v, str) for v in values):
        names = list(classes) if classes is not None else sorted(set(values))
        index = {name: i for i, name in enumerate(names)}
        unknown = sorted(set(values) - set(index))
        if unknown:
            raise DataError(
                f"{shown}: label {unknown[0]!r} is not a class of the train split; give both splits its classes"
            )
        return [index[v] for v in values], _at_least_two(names, shown)
    raise DataError(f"{shown}: label column {column!r} holds neither integers nor strings; name another: ,label=COLUMN")


def _at_least_two(names: list[str], shown: str) -> list[str]:
    if len(names) < 2:
        raise DataError(f"{shown} has {len(names)} class(es): a classifier needs at least two; check the label column")
    return names
