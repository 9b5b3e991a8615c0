"""A hub folder to a Hugging Face Hub repo (``huggingface_hub``'s ``create_repo`` and ``upload_folder``), as timm's
``push_to_hf_hub`` and transformers' ``push_to_hub`` publish theirs.

The token and the endpoint are huggingface_hub's own (``HF_TOKEN`` or ``hf auth login``; ``HF_ENDPOINT``). Whether the
Hub can be reached is asked before anything is exported (:func:`check_can_push`): under ``HF_HUB_OFFLINE=1``, or with
an endpoint that does not answer one request within :func:`learngene.formats.hub.lookup_seconds`, the push is refused
in one line instead of huggingface_hub's retries.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import LearngeneError, first_line, require_argument
from .atomic import library_version, quote
from .export import CARD
from .hub import check_repo_id, hub_answers, lookup_seconds


def check_can_push(repo_id: object) -> str:
    """``repo_id`` (``ORG/NAME``) if it names a Hub repo and the Hub answers; else one line saying why not."""
    from huggingface_hub import constants

    require_argument(repo_id, str, "push_to_hub", "a Hub repo id, ORG/NAME")
    assert isinstance(repo_id, str)
    check_repo_id(repo_id, None, repo_id)
    if constants.HF_HUB_OFFLINE:
        raise LearngeneError(
            f"cannot push to {repo_id}: HF_HUB_OFFLINE=1 keeps learngene off the network; unset it where there is "
            f"network, or leave push_to_hub (--push-to-hub) out and upload the folder later (`hf upload {repo_id} DIR`)"
        )
    if not hub_answers(repo_id, CARD, None):
        raise LearngeneError(
            f"cannot push to {repo_id}: the Hub at {constants.ENDPOINT} did not answer within {lookup_seconds():g} s "
            f"(no network, or a wrong HF_ENDPOINT); leave push_to_hub (--push-to-hub) out and upload the folder "
            f"later (`hf upload {repo_id} DIR`), or set HF_HUB_ETAG_TIMEOUT=SECONDS to wait longer"
        )
    return repo_id


def push_folder(folder: str | os.PathLike, repo_id: str, private: bool | None = None) -> str:
    """Upload the hub folder ``folder`` to the model repo ``repo_id`` (created when missing); the URL of the commit.

    A refusal of the Hub (no token, no write access, a name taken by another account) is one line that keeps the
    folder, already written, for a later upload."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(library_name="learngene", library_version=library_version())
    try:
        api.create_repo(repo_id, repo_type="model", exist_ok=True, private=private)
        commit = api.upload_folder(
            repo_id=repo_id,
            repo_type="model",
            folder_path=str(folder),
            commit_message=f"Upload {Path(folder).name} with learngene {library_version()}",
        )
    except (HfHubHTTPError, OSError, ValueError) as exc:  # HTTP refusals, no token (a ValueError/OSError), network
        raise LearngeneError(
            f"pushing {quote(folder)} to {repo_id} failed ({first_line(exc)}); the folder is written: set HF_TOKEN to "
            f"a token with write access to {repo_id.partition('/')[0] if '/' in repo_id else 'your account'} and "
            f"upload it with `hf upload {repo_id} {folder}`"
        ) from None
    return str(getattr(commit, "commit_url", None) or commit)
