"""Ancestries by name on the Hugging Face Hub: ``hf-hub:ORG/NAME[@REVISION]`` and ``timm:NAME[.TAG]``.

``hf-hub:`` names a timm hub repo (``config.json`` with ``architecture`` and ``pretrained_cfg``) or a transformers
repo of a family :mod:`learngene.formats.convert` reads (ViT, DeiT, DINOv2, CLIP and SigLIP image towers), as
``timm.create_model("hf-hub:...")`` and transformers' ``from_pretrained("org/name")`` accept them; ``timm:`` names one
of timm's registered pretrained tags, whose ``pretrained_cfg`` says which Hub repo (and file) holds its weights.

Only the files an ancestry needs are fetched: ``config.json``, one weight file (the first of
:data:`~learngene.formats.convert.WEIGHT_FILES` the repo has), and its image-processor config and model card (licence)
where it has them. They are fetched by ``huggingface_hub`` into its standard cache (``HF_HOME``, ``HF_HUB_CACHE``),
and a revision whose ``config.json`` is in that cache is read from there as it is, without asking the network (as
``local_files_only``): a second run, or a machine without network, reads a filled cache whether ``HF_HUB_OFFLINE``
is set or not. Where something must be fetched, the Hub is asked once, for at most :data:`HUB_LOOKUP_SECONDS`
(``HF_HUB_ETAG_TIMEOUT`` when set): with no answer, one line names ``HF_HUB_OFFLINE`` and the download command,
instead of huggingface_hub's retries (minutes of them without network). ``HF_TOKEN`` opens gated repos. Names and
cache pointers are checked before huggingface_hub sees them: a repo id by the Hub's grammar, a revision without
``..``, a ``refs/REVISION`` file holding a commit hash (anything else would point outside the cache). What was read
is recorded as ``{"repo_id": ..., "revision": <commit>}`` (:attr:`HubModel.source`): the gene's header and every
descendant's model card name it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import LearngeneError, first_line, held_warnings
from .convert import CONFIG, WEIGHT_FILES
from .licenses import README, check_license

HUB_PREFIX, TIMM_PREFIX = "hf-hub:", "timm:"
PREPROCESSOR = "preprocessor_config.json"  # a transformers repo's image normalization
# The Hub's names (huggingface_hub's validate_repo_id): [ORG/]NAME, each part 1 to 96 ASCII letters, digits, "_", "."
# and "-", starting and ending with a letter, digit or "_", no "--" or "..", no ".git" at the end
_REPO_PART = r"[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}", re.ASCII)
# a branch, tag or commit: path segments of the same characters (a ref such as refs/pr/1), no ".." (checked apart)
_REVISION = re.compile(r"[\w.-]+(?:/[\w.-]+)*", re.ASCII)
_COMMIT = re.compile(r"[0-9a-f]{40}")  # what a cache's refs/REVISION file holds: a full commit hash
MAX_REVISION_CHARS = 255
# One lookup, no retries, this long at most: without network huggingface_hub retries for half a minute and more.
# Long enough for a slow link to answer a HEAD request; HF_HUB_ETAG_TIMEOUT, when set, replaces it.
HUB_LOOKUP_SECONDS = 2.0


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
    """The files of Hub model ``name`` in the local cache, fetched there first when missing (and the Hub reachable).

    A revision whose ``config.json`` is cached is read from the cache alone (optional files it lacks are taken as
    absent; only a missing weight file is fetched, at that cached commit)."""
    if name.startswith(TIMM_PREFIX):
        return _fetch_timm(name)
    repo_id, _, revision = name[len(HUB_PREFIX) :].partition("@")
    check_repo_id(repo_id, revision or None, name)
    snapshot = cached_snapshot(repo_id, revision or None, name)
    if snapshot is not None and (snapshot / CONFIG).is_file():
        _first_of(repo_id, WEIGHT_FILES, snapshot.name, name)
        return HubModel(folder=snapshot, weights=None, arch=None, source=_source(repo_id, snapshot / CONFIG))
    config = _download(repo_id, CONFIG, revision or None, name)
    if config is None:
        raise LearngeneError(
            f"{name} has no {CONFIG}: it is not a timm or transformers model repo; give a repo with a {CONFIG}, "
            f"or a timm checkpoint with timm_model (--timm-model)"
        )
    commit = _source(repo_id, config)["revision"]  # the same commit for every file, whatever a branch does meanwhile
    _first_of(repo_id, WEIGHT_FILES, commit, name)
    for optional in (PREPROCESSOR, README):
        _download(repo_id, optional, commit, name)
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
            f"timm_model={arch!r} (--timm-model {arch})"
        )
    repo_id, _, revision = cfg.hf_hub_id.partition("@")
    check_repo_id(repo_id, revision or None, name)
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


_NAME_FIX = "write hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION, e.g. hf-hub:timm/deit_tiny_patch16_224.fb_in1k"


def check_repo_id(repo_id: str, revision: str | None, name: str) -> None:
    """Refuse in one line, before huggingface_hub sees them, a repo id outside the Hub's grammar (its
    ``validate_repo_id``: ``[ORG/]NAME``, each part at most 96 characters) and a revision that is not a branch, tag
    or commit name (a ``..`` would lead out of the cache's ``refs`` folder)."""
    parts = repo_id.split("/")
    if not _REPO_ID.fullmatch(repo_id):
        long = max(parts, key=len)
        why = (
            f"a part of it has {len(long)} characters, more than the Hub's 96"
            if len(long) > 96
            else "the Hub's names are ORG/NAME, each part of ASCII letters, digits, '_', '.' and '-', "
            "starting and ending with a letter, digit or '_'"
        )
        raise LearngeneError(f"{name!r} does not name a Hub repo ({why}); {_NAME_FIX}")
    if "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise LearngeneError(
            f"{name!r} does not name a Hub repo (the Hub's names hold no '--' or '..' and do not end in '.git'); "
            f"{_NAME_FIX}"
        )
    if revision is not None and (
        not _REVISION.fullmatch(revision) or ".." in revision or len(revision) > MAX_REVISION_CHARS
    ):
        raise LearngeneError(
            f"{name!r}: {revision[:80]!r} is not a branch, tag or commit name (ASCII letters, digits, '_', '.', '-' "
            f"and '/', no '..', at most {MAX_REVISION_CHARS} characters); give the revision as the Hub shows it"
        )


def _repo_cache(repo_id: str) -> Path:
    """The repo's folder in huggingface_hub's cache (``models--ORG--NAME``)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")


def cached_snapshot(repo_id: str, revision: str | None, name: str) -> Path | None:
    """The cache's snapshot folder of ``revision`` (default ``main``), read without the network; None where the cache
    has none. A ``refs/REVISION`` file that holds anything but a commit hash is one line: read as huggingface_hub
    reads it, it would name a folder outside the cache."""
    repo = _repo_cache(repo_id)
    revision = revision or "main"
    commit = revision
    if not _COMMIT.fullmatch(revision):
        ref = repo / "refs" / revision
        if not ref.is_file():
            return None
        with open(ref, "rb") as fh:
            held = fh.read(256)
        commit = held.decode("ascii", errors="replace").strip()
        if not _COMMIT.fullmatch(commit):
            raise LearngeneError(
                f"{name}: the Hugging Face cache's pointer {str(ref)!r} holds {commit[:60]!r}, not a commit hash "
                f"(40 hex digits), so it names no snapshot of the cache; delete {str(repo)!r} and fetch the model again"
            )
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def _known_absent(repo_id: str, commit: str, filename: str) -> bool:
    """Whether the cache records that the Hub has no ``filename`` at ``commit`` (huggingface_hub's ``.no_exist``)."""
    return (_repo_cache(repo_id) / ".no_exist" / commit / filename).is_file()


def _source(repo_id: str, fetched: Path) -> dict[str, str]:
    """The repo and the commit a fetched file belongs to (its snapshot folder is named after the commit)."""
    snapshot = next((p for p in fetched.parents if p.parent.name == "snapshots"), fetched.parent)
    return {"repo_id": repo_id, "revision": snapshot.name}


def _first_of(repo_id: str, files: tuple[str, ...], revision: str | None, name: str) -> Path:
    """The first of ``files`` the repo has: a cached one without a lookup, else the first the Hub has."""
    snapshot = cached_snapshot(repo_id, revision, name)
    if snapshot is not None:
        cached = next((snapshot / f for f in files if (snapshot / f).is_file()), None)
        if cached is not None:
            return cached
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
    snapshot = cached_snapshot(repo_id, revision, name)
    if snapshot is not None and (snapshot / filename).is_file():
        return snapshot / filename
    if snapshot is not None and _known_absent(repo_id, snapshot.name, filename):
        return None
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    refusals = (  # the Hub's answers that no other file or revision mends, in one line each
        (
            GatedRepoError,
            f"{name} is a gated repo: accept its terms on its Hub page, then set HF_TOKEN to a token of that account",
        ),
        (RevisionNotFoundError, f"{name}: the repo has no revision {revision!r}; give a branch, tag or commit it has"),
        (
            RepositoryNotFoundError,
            f"{name}: no such repo on the Hugging Face Hub (or it is private: set HF_TOKEN); check the name",
        ),
    )
    answers = hub_answers(repo_id, filename, revision)  # one brief lookup: a Hub out of reach is not waited for
    try:
        if answers:
            with held_warnings():
                return Path(
                    huggingface_hub.hf_hub_download(
                        repo_id, filename, revision=revision, library_name="learngene", library_version=__version__
                    )
                )
    except LocalEntryNotFoundError:  # neither cached nor reachable (the network went away since the lookup)
        pass
    except (GatedRepoError, RevisionNotFoundError, RepositoryNotFoundError) as exc:
        raise LearngeneError(next(said for kind, said in refusals if isinstance(exc, kind))) from None
    except EntryNotFoundError:  # the Hub answered: the repo has no such file
        return None
    except OSError as exc:  # the cache cannot be written, a broken connection mid-download
        raise LearngeneError(
            f"cannot fetch {filename} of {name} ({first_line(exc)}); "
            f"check the network and that the cache folder {constants.HF_HUB_CACHE} is writable"
        ) from None
    if filename not in (CONFIG, *WEIGHT_FILES):  # an optional file, not cached and not reachable: read without it
        return None
    raise LearngeneError(_not_cached(repo_id, filename, revision, name))


def lookup_seconds() -> float:
    """How long the one lookup may wait for the Hub: ``HF_HUB_ETAG_TIMEOUT`` when set, else
    :data:`HUB_LOOKUP_SECONDS`."""
    from huggingface_hub import constants

    if constants.HF_HUB_ETAG_TIMEOUT != constants.DEFAULT_ETAG_TIMEOUT:
        return float(constants.HF_HUB_ETAG_TIMEOUT)
    return HUB_LOOKUP_SECONDS


ANSWER_KEPT_SECONDS = 60.0  # the files of one model ask once; a later load asks again
_ANSWERS: dict[str, tuple[float, bool]] = {}


def hub_answers(repo_id: str, filename: str, revision: str | None, repo_type: str = "model") -> bool:
    """Whether the Hub answers at all (any HTTP status) one request for ``filename`` within :func:`lookup_seconds`,
    without retries; False at once under ``HF_HUB_OFFLINE``. The answer holds for :data:`ANSWER_KEPT_SECONDS`, so
    the other files of the same model do not wait again."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return False
    asked, answered = _ANSWERS.get(constants.ENDPOINT, (-ANSWER_KEPT_SECONDS, False))
    if time.monotonic() - asked < ANSWER_KEPT_SECONDS:
        return answered
    url = hf_hub_url(repo_id, filename, revision=revision, repo_type=repo_type, endpoint=constants.ENDPOINT)
    # huggingface_hub's own request first builds headers that ask the Hub for more (its agent registry: 3 s more
    # without network), and retries: one bare HEAD says whether the Hub is there
    try:
        get_session().head(url, timeout=lookup_seconds(), follow_redirects=False)
        answered = True
    except Exception:  # noqa: BLE001  no answer of any kind (DNS, refused, timed out, TLS, a bad HF_ENDPOINT)
        answered = False
    _ANSWERS[constants.ENDPOINT] = (time.monotonic(), answered)
    return answered


def _not_cached(repo_id: str, filename: str, revision: str | None, name: str) -> str:
    """Why ``filename`` of the repo could not be had: neither cached nor fetched (offline, or no answer), and the
    command that fetches it where there is network."""
    from huggingface_hub import constants

    offline = (
        "HF_HUB_OFFLINE=1 keeps learngene off the network"
        if constants.HF_HUB_OFFLINE
        else f"the Hub did not answer within {lookup_seconds():g} s (set HF_HUB_OFFLINE=1 to skip the lookup, "
        f"HF_HUB_ETAG_TIMEOUT=SECONDS to wait longer)"
    )
    wanted = [CONFIG, filename if filename != CONFIG else WEIGHT_FILES[0]]
    command = " ".join(["hf", "download", repo_id, *wanted, *(["--revision", revision] if revision else [])])
    return (
        f"{name} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and {offline}; where there is network, "
        f"run `{command}` with HF_HUB_CACHE={constants.HF_HUB_CACHE} (or copy a cache that "
        f"holds it there), or pass a downloaded folder instead"
    )


def describe_source(source: dict[str, str]) -> str:
    """One line naming a Hub ancestry's repo and revision (the model card's and ``learngene inspect``'s)."""
    tag = f" (timm's {source['timm']})" if source.get("timm") else ""
    return f"Hugging Face Hub repo `{source.get('repo_id', '?')}` at revision `{source.get('revision', '?')}`{tag}"
