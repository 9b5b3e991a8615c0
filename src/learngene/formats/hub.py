"""Ancestries by name on the Hugging Face Hub: ``hf-hub:ORG/NAME[@REVISION]`` and ``timm:NAME[.TAG]``.

``hf-hub:`` names a timm hub repo (``config.json`` with ``architecture`` and ``pretrained_cfg``) or a transformers
repo of a family :mod:`learngene.formats.convert` reads (ViT, DeiT, DINOv2, CLIP and SigLIP image towers), as
``timm.create_model("hf-hub:...")`` and transformers' ``from_pretrained("org/name")`` accept them; ``timm:`` names one
of timm's registered pretrained tags, whose ``pretrained_cfg`` says which Hub repo (and file) holds its weights.

Only the files an ancestry needs are fetched: ``config.json``, one weight file (the first of
:data:`~learngene.formats.convert.WEIGHT_FILES` the repo has), and its image-processor config and model card (licence)
where it has them. They are fetched by ``huggingface_hub`` into its standard cache (``HF_HOME``, ``HF_HUB_CACHE``),
so a second run, or a machine without network that has ``HF_HUB_OFFLINE=1`` and a filled cache, reads them from
there; ``HF_TOKEN`` opens gated repos. Where a file is neither cached nor reachable, one line says what to download
and where. What was read is recorded as ``{"repo_id": ..., "revision": <commit>}`` (:attr:`HubModel.source`): the
gene's header and every descendant's model card name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import LearngeneError
from .convert import CONFIG, WEIGHT_FILES
from .licenses import README, check_license

HUB_PREFIX, TIMM_PREFIX = "hf-hub:", "timm:"
PREPROCESSOR = "preprocessor_config.json"  # a transformers repo's image normalization
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


@dataclass(frozen=True)
class HubModel:
    """What a Hub name resolved to in the local cache.

    Attributes:
        folder: the repo's snapshot folder (config and weights side by side), for ``hf-hub:``; None for ``timm:``.
        weights: the weight file of a ``timm:`` tag; None for ``hf-hub:``.
        arch: the timm architecture of a ``timm:`` tag; None for ``hf-hub:`` (its config names it).
        pretrained_cfg: a ``timm:`` tag's preprocessing (input size, mean, std, crop), from timm's registry.
        license: a ``timm:`` tag's licence as timm's registry records it (its published weights are the ones read).
        source: ``{"repo_id": ..., "revision": <commit hash>}`` (and ``"timm"``: the tag's full name).
    """

    folder: Path | None
    weights: Path | None
    arch: str | None
    pretrained_cfg: dict[str, Any] = field(default_factory=dict)
    license: str | None = None
    source: dict[str, str] = field(default_factory=dict)


def is_hub_name(path: object) -> bool:
    """Whether ``path`` names a Hub model (``hf-hub:...`` or ``timm:...``) rather than a file or folder."""
    return isinstance(path, str) and path.startswith((HUB_PREFIX, TIMM_PREFIX))


def looks_like_repo_id(path: object) -> bool:
    """Whether ``path`` is no file or folder here but has the shape of a Hub repo id (``ORG/NAME``): the user
    probably meant ``hf-hub:ORG/NAME``, as transformers' ``from_pretrained("org/name")`` takes it."""
    return isinstance(path, str) and path.count("/") == 1 and bool(_REPO_ID.fullmatch(path)) and not Path(path).exists()


def fetch_model(name: str) -> HubModel:
    """The files of Hub model ``name`` in the local cache, fetched there first when missing (and the Hub reachable)."""
    if name.startswith(TIMM_PREFIX):
        return _fetch_timm(name)
    repo_id, _, revision = name[len(HUB_PREFIX) :].partition("@")
    _check_repo_id(repo_id, name)
    config = _download(repo_id, CONFIG, revision or None, name)
    if config is None:
        raise LearngeneError(
            f"{name} has no {CONFIG}: it is not a timm or transformers model repo; give a repo with a {CONFIG}, "
            f"or a timm checkpoint with --timm-model"
        )
    _first_of(repo_id, WEIGHT_FILES, revision or None, name)
    for optional in (PREPROCESSOR, README):
        _download(repo_id, optional, revision or None, name)
    return HubModel(folder=config.parent, weights=None, arch=None, source=_source(repo_id, config))


def _fetch_timm(name: str) -> HubModel:
    """A timm pretrained tag's weight file, from the Hub repo its ``pretrained_cfg`` names."""
    import timm
    from timm.models import get_pretrained_cfg
    from timm.models._registry import split_model_name_tag

    model_name = name[len(TIMM_PREFIX) :]
    arch, _ = split_model_name_tag(model_name)
    if not timm.is_model(arch):
        raise LearngeneError(f"timm has no model {arch!r}; pick a name from timm.list_pretrained()")
    try:
        cfg = get_pretrained_cfg(model_name)
    except RuntimeError as exc:  # an unknown tag
        tags = timm.list_pretrained(f"{arch}.*")
        raise LearngeneError(
            f"{exc}; timm's pretrained tags of {arch}: {', '.join(tags[:8]) or 'none'}"
            + (f" and {len(tags) - 8} more" if len(tags) > 8 else "")
        ) from None
    if cfg is None or not cfg.hf_hub_id:
        where = f" (timm fetches them from {cfg.url})" if cfg is not None and cfg.url else ""
        raise LearngeneError(
            f"timm's {model_name} has no weights on the Hugging Face Hub{where}; download the file and pass it with "
            f"--timm-model {arch}"
        )
    repo_id, _, revision = cfg.hf_hub_id.partition("@")
    files = (cfg.hf_hub_filename,) if cfg.hf_hub_filename else WEIGHT_FILES[:2]
    weights = _first_of(repo_id, files, revision or None, name)
    keys = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std")
    license = None
    if cfg.license:
        try:
            license = check_license(cfg.license, "")
        except LearngeneError:
            license = None  # a free-text licence note in timm's registry: none recorded
    return HubModel(
        folder=None,
        weights=weights,
        arch=arch,
        pretrained_cfg={k: getattr(cfg, k) for k in keys if getattr(cfg, k, None) is not None},
        license=license,
        source={**_source(repo_id, weights), "timm": f"{arch}.{cfg.tag}" if cfg.tag else arch},
    )


def _check_repo_id(repo_id: str, name: str) -> None:
    if not _REPO_ID.fullmatch(repo_id):
        raise LearngeneError(
            f"{name!r} does not name a Hub repo; write hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION, e.g. "
            f"hf-hub:timm/deit_tiny_patch16_224.fb_in1k"
        )


def _source(repo_id: str, fetched: Path) -> dict[str, str]:
    """The repo and the commit a fetched file belongs to (its snapshot folder is named after the commit)."""
    snapshot = next((p for p in fetched.parents if p.parent.name == "snapshots"), fetched.parent)
    return {"repo_id": repo_id, "revision": snapshot.name}


def _first_of(repo_id: str, files: tuple[str, ...], revision: str | None, name: str) -> Path:
    for filename in files:
        path = _download(repo_id, filename, revision, name)
        if path is not None:
            return path
    raise LearngeneError(
        f"{name} has none of {', '.join(files)} (a sharded checkpoint is not read); give a repo with one weight "
        f"file, or merge the shards into model.safetensors and pass the folder"
    )


def _download(repo_id: str, filename: str, revision: str | None, name: str) -> Path | None:
    """``filename`` of the repo in the local cache (fetched when missing); None where the repo has no such file.
    A file neither cached nor reachable, a missing repo or revision, a gated repo: one line."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(
            huggingface_hub.hf_hub_download(
                repo_id, filename, revision=revision, library_name="learngene", library_version=__version__
            )
        )
    except LocalEntryNotFoundError:  # neither cached nor reachable (offline, or no network)
        if filename not in (CONFIG, *WEIGHT_FILES) or _cached_elsewhere(repo_id, filename, revision):
            return None  # an optional file, or another weight file of a repo whose cache holds one
        raise LearngeneError(_not_cached(repo_id, filename, revision, name, constants)) from None
    except GatedRepoError:
        raise LearngeneError(
            f"{name} is a gated repo: accept its terms on its Hub page, then set HF_TOKEN to a token of that account"
        ) from None
    except RevisionNotFoundError:
        raise LearngeneError(
            f"{name}: the repo has no revision {revision!r}; give a branch, tag or commit it has"
        ) from None
    except RepositoryNotFoundError:
        raise LearngeneError(
            f"{name}: no such repo on the Hugging Face Hub (or it is private: set HF_TOKEN); check the name"
        ) from None
    except EntryNotFoundError:  # the Hub answered: the repo has no such file
        return None
    except OSError as exc:  # the cache cannot be written, a broken connection mid-download
        raise LearngeneError(
            f"cannot fetch {filename} of {name} ({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); "
            f"check the network and that the cache folder {constants.HF_HUB_CACHE} is writable"
        ) from None


def _cached_elsewhere(repo_id: str, filename: str, revision: str | None) -> bool:
    """Whether the cache holds another of the weight files (``model.safetensors`` missing where
    ``pytorch_model.bin`` is cached is no reason to stop)."""
    from huggingface_hub import try_to_load_from_cache

    return filename in WEIGHT_FILES and any(
        isinstance(try_to_load_from_cache(repo_id, f, revision=revision), str) for f in WEIGHT_FILES if f != filename
    )


def _not_cached(repo_id: str, filename: str, revision: str | None, name: str, constants: Any) -> str:
    offline = (
        "HF_HUB_OFFLINE=1 keeps learngene off the network" if constants.HF_HUB_OFFLINE else "the Hub cannot be reached"
    )
    wanted = f"{CONFIG} {filename}" if filename != CONFIG else f"{CONFIG} {WEIGHT_FILES[0]}"
    at = f" --revision {revision}" if revision else ""
    return (
        f"{name} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and {offline}; where there is network, "
        f"run `hf download {repo_id} {wanted}{at}` with HF_HUB_CACHE={constants.HF_HUB_CACHE} (or copy a cache that "
        f"holds it there), or pass a downloaded folder instead"
    )


def describe_source(source: dict[str, str]) -> str:
    """One line naming a Hub ancestry's repo and revision (the model card's and ``learngene inspect``'s)."""
    tag = f" (timm's {source['timm']})" if source.get("timm") else ""
    return f"Hugging Face Hub repo `{source.get('repo_id', '?')}` at revision `{source.get('revision', '?')}`{tag}"
