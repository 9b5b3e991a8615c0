"""A benchmark task's images: its training and test data at the ancestry's input size."""

from __future__ import annotations

from dataclasses import dataclass

from ..data import Data, class_subset, few_shot, load_dataset, take
from ..errors import LearngeneError
from ..vit.spec import ViTSpec
from .profiles import Task


@dataclass
class TaskData:
    task: Task
    train: Data
    eval: Data


def load_task(
    task: Task,
    spec: ViTSpec,
    data_dir: str | None = None,
    loaded: dict | None = None,
    upstream_classes: tuple[int, ...] | None = None,
) -> TaskData:
    """The task's training and test images at the ancestry's input size (``loaded`` memoizes datasets).

    An ``other_classes`` task keeps only the classes outside ``upstream_classes``.
    """
    loaded = {} if loaded is None else loaded
    for split in ("train", "test"):
        if (task.data, split) not in loaded:
            loaded[task.data, split] = load_dataset(task.data, split, spec.img_size, data_dir, spec.in_chans)
    train_full, test_full = loaded[task.data, "train"], loaded[task.data, "test"]
    if task.other_classes:
        if not upstream_classes:
            raise LearngeneError(
                f"task {task.name} fine-tunes on the classes the upstream never saw, but the upstream "
                f"sees every class; give the profile upstreams with a class subset"
            )
        others = [c for c in range(train_full.num_classes) if c not in upstream_classes]
        train_full, test_full = class_subset(train_full, others), class_subset(test_full, others)
    if task.classes:
        if max(task.classes) >= train_full.num_classes or min(task.classes) < 0:
            raise LearngeneError(
                f"{task.data} has classes 0..{train_full.num_classes - 1}; classes (--classes) "
                f"{','.join(map(str, task.classes))} is outside them"
            )
        train_full, test_full = class_subset(train_full, task.classes), class_subset(test_full, task.classes)
    train_data = few_shot(train_full, task.shots) if task.shots else take(train_full, task.train_images, seed=1)
    return TaskData(task, train_data, test_full)
