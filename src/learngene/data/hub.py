"""Hugging Face ``datasets`` as a data source: ``--data hf:NAME_OR_PATH[:SPLIT][,image=COLUMN][,label=COLUMN]``.

``NAME_OR_PATH`` is a folder written by ``DatasetDict.save_to_disk`` or a dataset's name on the Hub, read by
``datasets.load_dataset`` from its cache (``HF_HUB_OFFLINE=1`` keeps it there). Training reads the ``train`` split;
evaluation ``SPLIT`` when given, else ``test``, else ``validation``. The image column is the one of the ``Image``
feature and the label column the one of the ``ClassLabel`` feature (else a column named ``label``) unless
``image=`` / ``label=`` name them. Images stream as an image folder's do (:class:`~learngene.data.folder.FolderData`:
the model's preprocessing, ``--aug deit``, DataLoader workers), so ``--train-images``, ``--few-shot`` and the label
space (the dataset's class names) follow the same rules, and are checked as a folder's are: an empty split, a row
without an image, an image that cannot be read or has more pixels than PIL decodes safely are one line before
anything trains (every row's header is read), and each image is decoded by the folder's rule
(:func:`~learngene.data.folder.decode_image`: a colour image for a grey model refused, never read as grey). A Hub
name is read from ``datasets``' cache without the network where it is there; else the Hub is asked once, briefly
(:func:`learngene.formats.hub.hub_answers`). Needs the optional ``datasets`` package
(``pip install 'learngene-vit[datasets]'``).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import DataError, LearngeneError, first_line, held_warnings
from .folder import FolderData, check_colour, decode_image, default_preprocessing, preprocessing_cfg
from .images import Data

COLUMN_OPTIONS = ("image", "label")
EVAL_SPLITS = ("test", "validation")


class HubImageData(FolderData):
    """The rows ``rows`` of a ``datasets.Dataset``, decoded one by one from its image column (as a folder's files:
    ``table``'s image column holds the undecoded bytes, ``datasets.Image(decode=False)``)."""

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
        refuse_colour: bool = False,
    ):
        # a sample's "path" names the row in this version of the table (the run fingerprint digests them)
        samples = [(f"{table._fingerprint}/{row}", label) for row, label in zip(rows, labels)]
        super().__init__(samples, classes, preprocessing, name, augment, workers, refuse_colour)
        self.table, self.image_column, self.rows = table, image_column, list(rows)

    def open_image(self, index: int, mode: str):
        row = self.rows[index]
        return decode_row(self.table, self.image_column, row, mode, self.refuse_colour, self.name)

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
            self.refuse_colour,
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
    import datasets

    target, eval_split, columns = parse_argument(argument)
    splits = _open(target)
    split = "train" if req.split == "train" else _eval_split(splits, eval_split, target)
    if split not in splits:
        raise DataError(f"hf:{target} has no {split!r} split (it has {', '.join(splits) or 'none'}); {_SPLITS_FIX}")
    table, shown = splits[split], f"hf:{target} ({split})"
    if len(table) == 0:
        raise DataError(f"{shown} is empty (no rows); {_EMPTY_FIX}")
    image_column, label_column = _columns(table, columns, target)
    if not isinstance(table.features[image_column], datasets.Image):
        raise DataError(
            f"{shown}: column {image_column!r} holds {type(table.features[image_column]).__name__} values, not images "
            f"(a datasets Image feature); name the image column: hf:{target},image=COLUMN"
        )
    table = table.cast_column(image_column, datasets.Image(decode=False))  # the bytes: decoded here, by the folder rule
    labels, classes = _labels(table, label_column, req.classes, shown)
    in_chans = req.in_chans or 3
    modes = _image_modes(table, image_column, shown)
    if in_chans == 1:  # colour for a grey model: refused, as a folder's (each image judged again as it is read)
        check_colour(modes, lambda row: decode_row(table, image_column, row, "RGB", False, shown), shown)
    pre = preprocessing_cfg(req.preprocessing or default_preprocessing(in_chans), req.img_size, in_chans)
    name = f"hf:{Path(target).name if Path(target).exists() else target}"
    augment = req.augment if req.split == "train" else "none"
    return HubImageData(
        table, image_column, range(len(table)), labels, classes, pre, name, augment, req.workers, in_chans == 1
    )


def decode_row(table: Any, column: str, row: int, mode: str | None, refuse_colour: bool, shown: str):
    """Row ``row``'s image of ``table`` (its ``column`` undecoded: ``{"bytes", "path"}``) decoded into ``mode`` by the
    folder's rule (:func:`~learngene.data.folder.decode_image`); a row without an image is one line."""
    value = table[row][column]
    data, path = (value.get("bytes"), value.get("path")) if isinstance(value, dict) else (None, None)
    if data is None and not path:
        raise DataError(_no_image(shown, row, column))
    source: io.BytesIO | str = io.BytesIO(data) if data is not None else str(path)
    return decode_image(source, mode, refuse_colour, f"{shown}: row {row}'s {column!r}")


def _image_modes(table: Any, column: str, shown: str) -> list[str]:
    """Every row's image mode, read from its header alone (PIL reads no pixels): before anything trains, a row without
    an image, an unreadable image or one past PIL's pixel limit is one line naming the row. Read from the arrow
    storage a batch of rows at a time, one image's bytes in memory at once."""
    modes: list[str] = []
    for batch in table.with_format("arrow").iter(batch_size=1024):
        for chunk in batch.column(column).chunks:
            present, data, path = chunk.is_valid(), chunk.field("bytes"), chunk.field("path")
            for i in range(len(chunk)):
                row = len(modes)
                if not present[i].as_py() or (not data[i].is_valid and not path[i].is_valid):
                    raise DataError(_no_image(shown, row, column))
                source = io.BytesIO(data[i].as_buffer()) if data[i].is_valid else path[i].as_py()
                modes.append(decode_image(source, None, shown=f"{shown}: row {row}'s {column!r}"))
    return modes


def _no_image(shown: str, row: int, column: str) -> str:
    return (
        f"{shown}: row {row}'s {column!r} holds no image (None); drop the rows without one, e.g. "
        f"dataset.filter(lambda r: r[{column!r}] is not None), and save it again"
    )


_EMPTY_FIX = "give a split with images, or name another: hf:NAME_OR_PATH:SPLIT"
_SPLITS_FIX = "save a DatasetDict with a train and a test split, or name the evaluation split: hf:NAME_OR_PATH:SPLIT"


def _open(target: str) -> dict[str, Any]:
    """The dataset's splits by name: a ``save_to_disk`` folder, or a Hub dataset through ``datasets``' cache."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            "hf: data need the datasets package; install it with pip install 'learngene-vit[datasets]'"
        ) from None
    if Path(target).exists():
        try:
            loaded = datasets.load_from_disk(target)
        except (FileNotFoundError, ValueError, OSError, IndexError, KeyError) as exc:
            empty = _empty_saved_split(Path(target))
            if empty is not None:  # datasets saves an empty split without data files, then cannot read it back
                raise DataError(f"hf:{target} ({empty}) is empty (no rows); {_EMPTY_FIX}") from None
            raise DataError(
                f"hf:{target} is not a dataset saved by datasets' save_to_disk ({first_line(exc)}); give such a "
                f"folder, or a dataset name on the Hub"
            ) from None
        if isinstance(loaded, datasets.Dataset):
            raise DataError(f"hf:{target} holds one split (a Dataset), not a DatasetDict; {_SPLITS_FIX}")
        return dict(loaded)
    return _from_the_hub(target)


def _empty_saved_split(folder: Path) -> str | None:
    """The first split of a ``save_to_disk`` folder saved without data files (an empty one), None where there is none
    (or the folder is no saved DatasetDict)."""
    try:
        splits = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        return next((s for s in splits if not json.loads((folder / s / "state.json").read_text())["_data_files"]), None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _from_the_hub(target: str) -> dict[str, Any]:
    """A Hub dataset by name: from ``datasets``' cache without the network where it is there (as ``HF_HUB_OFFLINE``
    reads it), else through one brief lookup (:func:`~learngene.formats.hub.hub_answers`) before ``datasets``, whose
    own lookups retry for half a minute and more without network."""
    import datasets
    from datasets import config

    from ..formats.hub import check_repo_id, hub_answers, lookup_seconds

    try:
        check_repo_id(target, None, f"hf:{target}")
    except LearngeneError as exc:
        raise DataError(str(exc).replace("hf-hub:", "hf:")) from None
    try:
        with _hub_offline(), held_warnings(("huggingface_hub", "datasets"), say=False):
            return dict(datasets.load_dataset(target))
    except (ConnectionError, FileNotFoundError, OSError, ValueError):  # not in the cache
        pass
    if config.HF_HUB_OFFLINE:
        where = "HF_HUB_OFFLINE=1 keeps it off the network"
    elif not hub_answers(target, "README.md", None, repo_type="dataset"):
        where = f"the Hub did not answer within {lookup_seconds():g} s (set HF_HUB_OFFLINE=1 to skip the lookup)"
    else:
        try:
            with held_warnings(("huggingface_hub", "datasets")):
                return dict(datasets.load_dataset(target))
        except (ConnectionError, FileNotFoundError, OSError, ValueError) as exc:
            where = f"the Hub did not give it ({first_line(exc)})"
    raise DataError(
        f"hf:{target} is neither a folder nor a dataset in the datasets cache {config.HF_DATASETS_CACHE}, "
        f"and {where}; where there is network, run "
        f"python -c \"import datasets; datasets.load_dataset('{target}').save_to_disk('DIR')\" and give the "
        f"data as hf:DIR"
    ) from None


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """``datasets`` and ``huggingface_hub`` as ``HF_HUB_OFFLINE=1`` makes them (their switch is read at import: this
    sets the values they read), for a first try from the cache alone."""
    import datasets.config
    from huggingface_hub import constants

    kept = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = kept


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
