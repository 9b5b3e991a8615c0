"""Datasets, the subsets the benchmark needs, and the one batch iterator.

Small datasets (Fashion-MNIST, scikit-learn digits, small image folders) live in memory as uint8
tensors and are normalized batch by batch; anything a torch ``Dataset`` can read streams through a
``DataLoader``. Both are consumed through :class:`Batches`, whose order depends only on
``(seed, epoch)``: the same seed gives the same batches, a resumed run can skip to any step, and
under DDP each rank takes its share of the very same global batch.

The rooms: ``images`` (in-memory data and subsets), ``sources`` (the registered datasets ``--data``
names), ``folder`` (image folders streamed with a model's preprocessing), ``augment`` and ``batches``.
"""

from .augment import AUGMENTATIONS, DEIT_RECIPE, BatchMixer, augment_batch
from .batches import Batch, Batches
from .folder import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    FolderData,
    default_workers,
    folder_transforms,
    image_folder,
    index_seed,
    preprocessing_cfg,
    write_image_folder,
)
from .images import (
    Data,
    ImageData,
    class_subset,
    convert_channels,
    few_shot,
    fraction,
    label_space,
    normalize,
    resize,
    take,
)
from .sources import (
    BUILTIN_DATASETS,
    DATA_SOURCES,
    DEBIAN_FASHION_MNIST,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    DataSource,
    LoadRequest,
    cache_dir,
    digits,
    fashion_mnist,
    find_source,
    load_dataset,
    load_splits,
    register_source,
    torchvision_dataset,
)

__all__ = [
    "AUGMENTATIONS",
    "BUILTIN_DATASETS",
    "Batch",
    "BatchMixer",
    "Batches",
    "DATA_SOURCES",
    "DEBIAN_FASHION_MNIST",
    "DEIT_RECIPE",
    "Data",
    "DataSource",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "FolderData",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageData",
    "LoadRequest",
    "augment_batch",
    "cache_dir",
    "class_subset",
    "convert_channels",
    "default_workers",
    "digits",
    "fashion_mnist",
    "few_shot",
    "find_source",
    "folder_transforms",
    "fraction",
    "image_folder",
    "index_seed",
    "label_space",
    "load_dataset",
    "load_splits",
    "normalize",
    "preprocessing_cfg",
    "register_source",
    "resize",
    "take",
    "torchvision_dataset",
    "write_image_folder",
]
