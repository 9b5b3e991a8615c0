"""A Hugging Face cache made offline for the tests: repos written in the cache layout huggingface_hub documents
(``models--ORG--NAME/{blobs, refs/REF, snapshots/COMMIT/FILE -> blob}``, checked with its own ``scan_cache_dir``), read
with ``HF_HUB_OFFLINE=1``; tiny timm, transformers and ``datasets`` models and data to put there; readers of
TensorBoard event files and W&B offline run files."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

TIMM_REPO = "learngene-tests/vit-tiny-hub"  # a timm hub repo (config.json with architecture, model_args)
DINOV2_REPO = "learngene-tests/dinov2-tiny"  # a transformers Dinov2Model
TIMM_TAG = "deit_tiny_patch16_224.fb_in1k"  # a timm pretrained tag; timm's registry names its repo
TINY_TIMM_ARGS = dict(depth=2, embed_dim=32, num_heads=2, img_size=16, patch_size=4)


def offline_hub(monkeypatch, cache: Path) -> Path:
    """Point huggingface_hub at ``cache`` with the Hub switched off: the variables for any process started from
    here, and the values huggingface_hub read when it was imported, for this one."""
    from huggingface_hub import constants

    cache.mkdir(parents=True, exist_ok=True)
    for name, value in (("HF_HUB_CACHE", str(cache)), ("HF_HOME", str(cache.parent / "hf-home"))):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    try:
        import datasets.config
    except ImportError:
        pass
    else:
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return cache


def cache_repo(cache: Path, repo_id: str, files: dict[str, bytes], ref: str = "main", commit: str | None = None) -> str:
    """Put ``files`` (name -> content) into ``cache`` as revision ``commit`` of model repo ``repo_id``, ``ref``
    pointing at it; returns the commit hash."""
    commit = commit or hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return commit


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def tiny_timm_folder(folder: Path, seed: int = 0, license: str | None = "apache-2.0") -> torch.nn.Module:
    """A timm hub folder written by timm's own ``save_for_hf`` (config.json with model_args and pretrained_cfg)."""
    import timm

    torch.manual_seed(seed)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=4, **TINY_TIMM_ARGS).eval()
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": (0.4, 0.4, 0.4), "std": (0.2, 0.25, 0.3)}
    timm.models.save_for_hf(model, str(folder), model_args=TINY_TIMM_ARGS)
    if license:
        (folder / "README.md").write_text(f"---\nlicense: {license}\nlibrary_name: timm\n---\n# a tiny ViT\n")
    return model


def tiny_dinov2_folder(folder: Path, seed: int = 0):
    """A transformers DINOv2 backbone written by its own ``save_pretrained``."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.Dinov2Config(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, image_size=16, patch_size=4
    )
    model = transformers.Dinov2Model(config).eval()
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]})
    )
    return model


def timm_tag_weights(seed: int = 0) -> tuple[bytes, dict[str, torch.Tensor]]:
    """model.safetensors of timm's ``TIMM_TAG`` architecture at its own size (random weights)."""
    import timm
    from safetensors.torch import save

    torch.manual_seed(seed)
    state = timm.create_model(TIMM_TAG.split(".")[0], pretrained=False).state_dict()
    return save({k: v.contiguous() for k, v in state.items()}), state


# ---- Hugging Face datasets ----------------------------------------------------------------------------------
def tiny_image_dataset(path: Path, train: int = 24, test: int = 12, classes: int = 3, size: int = 20, seed: int = 0):
    """A ``datasets.DatasetDict`` of RGB images (column ``img``, PIL) and labels (``label``, a ClassLabel), as
    CIFAR-10 on the Hub has them, saved with ``save_to_disk``. Class ``c`` is stripes of period ``c + 2``."""
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rng = np.random.default_rng(seed)

    def split(n: int):
        labels = [i % classes for i in range(n)]
        images = []
        for c in labels:
            pixels = rng.integers(0, 90, (size, size + 4, 3))
            pixels[:, np.arange(size + 4) % (c + 2) == 0] += 150
            images.append(Image.fromarray(pixels.astype(np.uint8)))
        features = datasets.Features(
            {"img": datasets.Image(), "label": datasets.ClassLabel(names=[f"kind{c}" for c in range(classes)])}
        )
        return datasets.Dataset.from_dict({"img": images, "label": labels}, features=features)

    ds = datasets.DatasetDict(train=split(train), test=split(test))
    ds.save_to_disk(str(path))
    return ds


# ---- reading what the loggers wrote -----------------------------------------------------------------------------
def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under ``log_dir``, read by TensorBoard's own event reader (a resumed run's purge applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_texts(log_dir: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return {
        tag: [b"".join(e.tensor_proto.string_val).decode() for e in acc.Tensors(tag)] for tag in acc.Tags()["tensors"]
    }


# W&B's transaction log (a run's .wandb file): LevelDB's log format (32 KiB blocks of records, each a 7-byte header:
# CRC32C, length, type FULL/FIRST/MIDDLE/LAST) after W&B's own 7-byte file header; each record a wandb Record protobuf
WANDB_HEADER, LEVELDB_BLOCK, LEVELDB_RECORD_HEADER = struct.Struct("<4sHB"), 32 * 1024, struct.Struct("<IHB")


def wandb_records(path: Path) -> list:
    """The records of a W&B run file, parsed with wandb's own protobuf schema (``wandb_internal_pb2.Record``)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _version = WANDB_HEADER.unpack_from(data)
    assert ident == b":W&B" and magic == 0xBEE1, f"{path} is not a W&B run file"
    records, pos, pending = [], WANDB_HEADER.size, b""
    while pos + LEVELDB_RECORD_HEADER.size <= len(data):
        left = LEVELDB_BLOCK - pos % LEVELDB_BLOCK
        if left < LEVELDB_RECORD_HEADER.size:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = LEVELDB_RECORD_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        start = pos + LEVELDB_RECORD_HEADER.size
        pending += data[start : start + length]
        pos = start + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_written() -> None:
    """Wait until W&B's service process has written every finished run's file: ``run.finish()`` returns before the
    service writes the run's last points to its ``.wandb`` file (on a busy machine the resumed run's file held none of
    its rows when the test read it); ``wandb.teardown()`` returns once the service has closed every run's file. The
    next ``wandb.init`` starts a new service."""
    import sys

    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()


def wandb_history(run_dir: Path) -> list[dict[str, object]]:
    """The history rows (``wandb.log`` calls) of every offline run file under ``run_dir``, each file's in the order
    written, the files in the order their runs started (each file's run record holds its start in nanoseconds: a
    file's modification time is when W&B's service last wrote it, and a folder's name has whole seconds), each row
    with its ``_step``."""
    wandb_written()
    rows = []
    files = [wandb_records(path) for path in run_dir.rglob("*.wandb")]
    for records in sorted(files, key=wandb_start):
        for record in records:
            if record.WhichOneof("record_type") == "history":
                row: dict[str, object] = {"_step": record.history.step.num}
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)
                    row[key] = json.loads(item.value_json)
                rows.append(row)
    return rows


def wandb_start(records: list) -> int:
    """When the run of a W&B run file's ``records`` started, in nanoseconds since the epoch (its run record's)."""
    return next(r.run.start_time.ToNanoseconds() for r in records if r.WhichOneof("record_type") == "run")


def wandb_run_ids(run_dir: Path) -> set[str]:
    wandb_written()
    return {p.stem.removeprefix("run-") for p in run_dir.rglob("*.wandb")}


def wandb_config(run_dir: Path) -> dict[str, object]:
    wandb_written()
    out: dict[str, object] = {}
    for path in run_dir.rglob("*.wandb"):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            config = record.config if kind == "config" else record.run.config if kind == "run" else None
            for item in config.update if config is not None else ():
                out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


# ---- the cache the hub guide's runnable blocks read (tests/test_docs.py) ----------------------------------------
DOCS_VIT = "timm/vit_small_patch16_224.augreg_in21k_ft_in1k"  # ViT-S's depth and heads, at a tiny width and size
DOCS_DINOV2 = "facebook/dinov2-small"
DOCS_TAG = "timm/deit_tiny_patch16_224.fb_in1k"  # timm's registry names this repo for the tag: real-size weights


def offline_wandb(monkeypatch, folder: Path) -> None:
    """W&B offline, its own files under ``folder``: nothing reaches the network or the home folder."""
    for name, value in (
        ("WANDB_MODE", "offline"),
        ("WANDB_SILENT", "true"),
        ("WANDB_CONFIG_DIR", str(folder / "config")),
        ("WANDB_CACHE_DIR", str(folder / "cache")),
        ("WANDB_DATA_DIR", str(folder / "data")),
        ("WANDB_DISABLE_GIT", "true"),
    ):
        monkeypatch.setenv(name, value)


def fill_docs_cache(tmp_path: Path, monkeypatch, work: Path) -> None:
    """The Hub repos docs/guides/hub.md names, tiny, in an offline cache; its dataset ``cifar10`` in ``work``."""
    import timm

    cache = offline_hub(monkeypatch, tmp_path / "hf-cache")
    offline_wandb(monkeypatch, tmp_path / "wandb-home")
    vit_args = dict(depth=12, embed_dim=48, num_heads=6, img_size=16, patch_size=4)
    src = tmp_path / "docs-src"
    for name in ("vit", "dinov2"):
        (src / name).mkdir(parents=True)
    torch.manual_seed(0)
    vit = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10, **vit_args)
    timm.models.save_for_hf(vit, str(src / "vit"), model_args=vit_args)
    cache_repo(cache, DOCS_VIT, folder_files(src / "vit"))
    transformers = pytest.importorskip("transformers")
    config = transformers.Dinov2Config(
        num_hidden_layers=4, hidden_size=48, num_attention_heads=6, image_size=16, patch_size=4
    )
    transformers.Dinov2Model(config).save_pretrained(src / "dinov2")
    cache_repo(cache, DOCS_DINOV2, folder_files(src / "dinov2"))
    cache_repo(cache, DOCS_TAG, {"model.safetensors": timm_tag_weights()[0]})
    tiny_image_dataset(work / "cifar10", train=40, test=20, classes=10, size=20)


# ---- a Hub (or W&B server) that never answers, and one that is not there -------------------------------------------
class SilentServer:
    """A local TCP port that takes connections (the kernel completes them from the listen backlog) and never answers:
    a network that swallows requests, as a firewall that drops them does. ``url`` is its address; ``contacted()``
    says whether anything connected to it."""

    def __init__(self):
        import socket

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def contacted(self) -> bool:
        self.socket.setblocking(False)
        try:
            connection, _ = self.socket.accept()
        except BlockingIOError:
            return False
        connection.close()
        return True

    def close(self) -> None:
        self.socket.close()


NO_SUCH_HOST = "http://learngene-tests.invalid"  # .invalid never resolves (RFC 2606): a lookup fails at the DNS step


def online_hub(monkeypatch, cache: Path, endpoint: str) -> Path:
    """As :func:`offline_hub`, but with ``HF_HUB_OFFLINE`` unset (the common case on a cluster without network) and
    the Hub at ``endpoint`` (for this process and those it starts)."""
    from huggingface_hub import constants

    from learngene.formats import hub

    offline_hub(monkeypatch, cache)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hub, "_ANSWERS", {})  # no answer remembered from another test
    try:
        import datasets.config
    except ImportError:
        pass
    else:
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    return cache
