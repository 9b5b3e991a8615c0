"""Label spaces: which classes a classifier head was trained on, and whether a head may be reused.

A label space is ``{"dataset": "fashion_mnist", "classes": ["T-shirt/top", ...]}`` (see
:func:`learngene.data.label_space`). Model files record it in their origin and learngenes in their
header, so that fine-tuning reuses a head only on the very classes it learned: two tasks with the
same class COUNT but other classes (e.g. Fashion-MNIST classes 0-4 against 5-9) get a fresh head.
"""

from __future__ import annotations

from typing import Any, NamedTuple

LabelSpace = dict[str, Any]


class HeadChoice(NamedTuple):
    fresh: bool  # make a new classifier head
    why: str  # one line for the user


def describe(space: LabelSpace | None, num_classes: int) -> str:
    if not space:
        return f"{num_classes} unnamed classes"
    classes = space.get("classes", [])
    shown = ", ".join(classes[:4]) + (f", ... ({len(classes)} in all)" if len(classes) > 4 else "")
    return f"{space.get('dataset') or 'data'} [{shown}]"


def choose_head(
    model_space: LabelSpace | None,
    model_classes: int,
    data_space: LabelSpace | None,
    data_classes: int,
    force_new: bool = False,
) -> HeadChoice:
    """Whether fine-tuning on ``data`` must replace the model's head, and why.

    The head is reused only when the class counts match and, where both sides name their classes,
    the names match in order. A model that names no classes (an older file, or a descendant whose
    head the gene did not provide, i.e. an untrained head) is reused when the counts match.
    """
    if force_new:
        return HeadChoice(True, f"new {data_classes}-way head (new_head=True, --new-head)")
    if model_classes != data_classes:
        return HeadChoice(True, f"new {data_classes}-way head: the model's head has {model_classes} classes")
    if model_space and data_space:
        if list(model_space.get("classes", [])) != list(data_space.get("classes", [])):
            return HeadChoice(
                True,
                f"new {data_classes}-way head: the model's head was trained on "
                f"{describe(model_space, model_classes)}, the data are "
                f"{describe(data_space, data_classes)}",
            )
        return HeadChoice(
            False, f"reusing the model's head: trained on the same classes ({describe(data_space, data_classes)})"
        )
    return HeadChoice(
        False,
        f"reusing the model's {model_classes}-way head: the model records no label space "
        f"(an untrained head, or a file from an older learngene); pass new_head=True (--new-head) to replace it",
    )
