"""Pretrained weights: hub ids and local folders, strict loading, sha256 manifest, result-row init tags.

A backbone's ``pretrained`` option names either

* a **checkpoint id** listed in ``checkpoints/manifest.json`` (e.g. ``braindecode/labram-pretrained``), looked
  up, in this order and without any network access, in the local mirror ``checkpoints/<id>/<weights>`` and
  in the Hugging Face cache; the hub is contacted only when ``HF_HUB_OFFLINE`` is unset *and*
  ``huggingface.co`` answers a 2-s TCP probe; or
* a **local folder** written by :func:`save_pretrained` (``model.safetensors``, ``config.json`` and a
  one-entry ``manifest.json`` holding the weights' sha256), given as a path or relative to ``checkpoints/``.

The weights file's sha256 is always checked against the manifest: a checkpoint id whose manifest entry has
no sha256 yet is refused until someone pins it (``python -m eegfm_bench.models.checkpoints pin <id>``).
Weights are read with ``safetensors`` (or ``torch.load(weights_only=True)`` for ``.bin``) and loaded with
``load_state_dict(strict=True)``; before that, any missing / unexpected key or shape difference is reported
by name in a :class:`StateDictMismatchError`. braindecode's ``from_pretrained`` is never used: it defaults to
``strict=False`` and, offline, retries for ~46 s before a misleading error (ENVIRONMENT.md).

Two documented, reported transformations are applied before the strict load: keys under an adapter's
``checkpoint_drop`` prefixes that the adapter removed on purpose (braindecode's randomly initialised
classifier ``final_layer.*``; CBraMod's pretraining projection ``proj_out.*``), and the adapter's
``adapt_state_dict`` (LaBraM: a longer temporal embedding is cut to the window's patch count). Both are listed
in the returned :class:`LoadReport`.

Matched fully random initialisation (paper 001 §4.2.2) is checked by :func:`check_random_init`: no parameter of
the random model may equal the checkpoint's.

The checkpoint folder defaults to ``<repo>/checkpoints`` and can be moved with ``EEGFM_CHECKPOINTS``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import socket
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import braindecode
import huggingface_hub  # hf_hub_download is looked up when called (a test replaces it to prove no download starts)
import torch
from huggingface_hub import constants, try_to_load_from_cache
from safetensors.torch import load_file, save_file

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.base import BackboneAdapter, checkpoint_dir

MANIFEST_NAME = "manifest.json"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MANIFEST_FORMAT = 1
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_OFF = {"1", "true", "yes", "on"}
log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (wrong backbone, unreadable file, no manifest, ...)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint's files are not where they were looked for; the message says where to put them."""


class ChecksumError(CheckpointError):
    """The weights' sha256 differs from the manifest, or the manifest has none pinned."""


class StateDictMismatchError(CheckpointError):
    """Checkpoint and model differ in keys or shapes; the message names the differing layers.

    Attributes
    ----------
    shape_mismatch : list of (str, tuple, tuple)
        ``(key, checkpoint shape, model shape)`` for every key present in both with different shapes.
    missing, unexpected : list of str
        Model keys absent from the checkpoint / checkpoint keys absent from the model.
    """

    def __init__(self, message: str, shape_mismatch=(), missing=(), unexpected=()):
        super().__init__(message)
        self.shape_mismatch = list(shape_mismatch)
        self.missing = list(missing)
        self.unexpected = list(unexpected)


# ------------------------------------------------------------------------------------------- manifest
def default_manifest() -> Path:
    """``checkpoint_dir() / "manifest.json"``."""
    return checkpoint_dir() / MANIFEST_NAME


@dataclass(frozen=True)
class CheckpointEntry:
    """One manifest entry.

    Parameters
    ----------
    id : str
        Checkpoint id (hub repo id, or the name given to :func:`save_pretrained`).
    backbone : str
        Registered backbone name the weights belong to (``BACKBONES``).
    weights : str
        Weights file name inside the folder / hub repo.
    sha256 : str or None
        Hex sha256 of the weights file; ``None`` = not pinned yet (loading is refused).
    source, license, notes : str
        Provenance, stored for the README and reports.
    compatible : tuple of str
        Other backbones whose models take these weights unchanged *and see the same kind of input* (a bipolar
        checkpoint never loads into a monopolar adapter, whatever this list says: :func:`load_checkpoint`).
    montage : {"monopolar", "bipolar"}
        The kind of channels the weights were trained on (BIOT's checkpoints: ``bipolar``, the double-banana
        derivations); must equal the adapter's ``input_montage``.
    """

    id: str
    backbone: str
    weights: str = WEIGHTS_NAME
    sha256: str | None = None
    source: str = ""
    license: str = ""
    notes: str = ""
    compatible: tuple[str, ...] = ()
    montage: str = "monopolar"

    def __post_init__(self):
        if self.sha256 is not None and not _SHA_RE.match(self.sha256):
            raise ValueError(f"checkpoint {self.id!r}: sha256 must be 64 lower-case hex characters, "
                             f"got {self.sha256!r}")
        object.__setattr__(self, "compatible", tuple(self.compatible or ()))
        if self.montage not in MONTAGES:
            raise ValueError(f"checkpoint {self.id!r}: montage must be one of {MONTAGES}, got {self.montage!r}")

    @property
    def backbones(self) -> tuple[str, ...]:
        """Every backbone the weights load into (``backbone`` first)."""
        return (self.backbone, *self.compatible)

    def to_dict(self) -> dict:
        """The entry as the manifest's JSON object: without its id (the key), ``compatible`` and ``montage`` only
        when not their defaults."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("id", "compatible", "montage")}
        if self.compatible:
            out["compatible"] = list(self.compatible)
        if self.montage != "monopolar":
            out["montage"] = self.montage
        return out


MONTAGES = ("monopolar", "bipolar")
"""Kinds of input channels a checkpoint / adapter is built for."""


def read_manifest(path: str | Path | None = None) -> dict[str, CheckpointEntry]:
    """Read a manifest (``{"format": 1, "checkpoints": {id: {...}}}``).

    Raises
    ------
    CheckpointError
        If the file is not valid JSON in that format. A missing file reads as an empty manifest.
    """
    path = Path(path) if path is not None else default_manifest()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {MANIFEST_FORMAT}")
        return {cid: CheckpointEntry(id=cid, **fields) for cid, fields in data["checkpoints"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"cannot read checkpoint manifest {path}: {exc}") from exc


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def write_manifest(entries: dict[str, CheckpointEntry], path: str | Path, description: str | None = None) -> None:
    """Write ``entries`` as a manifest at ``path`` (atomically), keeping an existing description."""
    path = Path(path)
    old: dict = {}
    if path.is_file():
        old = json.loads(path.read_text())
    data = {"format": MANIFEST_FORMAT}
    desc = description if description is not None else old.get("description")
    if desc:
        data["description"] = desc
    data["checkpoints"] = {cid: e.to_dict() for cid, e in sorted(entries.items())}
    _atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def add_manifest_entry(entry: CheckpointEntry, path: str | Path | None = None) -> None:
    """Add or replace one entry in the manifest at ``path`` (default: ``checkpoints/manifest.json``)."""
    path = Path(path) if path is not None else default_manifest()
    entries = read_manifest(path)
    entries[entry.id] = entry
    write_manifest(entries, path)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------- resolving
@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A located, checksum-verified weights file.

    Attributes
    ----------
    id : str
        Checkpoint id.
    backbone : str
        Backbone name from the manifest.
    weights_path : Path
        The verified weights file.
    sha256 : str
        Its sha256 (equal to the manifest's).
    origin : {"local", "hf-cache", "hub"}
        Where it was found.
    config : dict or None
        ``config.json`` of a folder written by :func:`save_pretrained` (``None`` for hub weights).
    """

    id: str
    backbone: str
    weights_path: Path
    sha256: str
    origin: str
    config: dict | None = None
    compatible: tuple[str, ...] = ()
    montage: str = "monopolar"

    @property
    def init_tag(self) -> str:
        """``pretrained:<id>@<first 12 hex of sha256>``."""
        return init_tag(self.id, self.sha256)


def _hub_offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFF:
        return True
    return bool(constants.HF_HUB_OFFLINE)


def _hub_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True, host
    except OSError as exc:
        return False, f"{host}:443 unreachable ({exc.__class__.__name__}: {exc})"


def _not_found(entry: CheckpointEntry, local: Path, why: str) -> CheckpointNotFoundError:
    sha = entry.sha256 or "<not pinned yet>"
    return CheckpointNotFoundError(
        f"pretrained weights {entry.id!r} ({entry.backbone}) are not available: {why}.\n"
        f"fix: put the file\n    {local / entry.weights}\n(sha256 {sha}), downloaded from "
        f"https://huggingface.co/{entry.id}/resolve/main/{entry.weights} on a machine with internet, "
        f"or run once online without HF_HUB_OFFLINE to fill the Hugging Face cache. See checkpoints/README.md.")


def _verify(entry: CheckpointEntry, path: Path, manifest_path: Path) -> str:
    actual = sha256_file(path)
    if entry.sha256 is None:
        raise ChecksumError(
            f"checkpoint {entry.id!r} has no sha256 pinned in {manifest_path}; the file {path} has sha256 "
            f"{actual}.\nfix: compare it with the SHA256 the hub shows for {entry.weights} "
            f"(https://huggingface.co/{entry.id}/blob/main/{entry.weights}), then pin it with "
            f"`python -m eegfm_bench.models.checkpoints pin {entry.id}`")
    if actual != entry.sha256:
        raise ChecksumError(
            f"checkpoint {entry.id!r}: {path} has sha256 {actual}, the manifest {manifest_path} expects "
            f"{entry.sha256}; the file is corrupted, modified or a different version.\nfix: replace it with "
            "the original file, or re-pin deliberately if the new version is intended")
    return actual


def _folder_entry(folder: Path) -> CheckpointEntry:
    mpath = folder / MANIFEST_NAME
    if not mpath.is_file():
        raise CheckpointError(
            f"checkpoint folder {folder} has no {MANIFEST_NAME} with the weights' sha256; fix: write it with "
            f"save_pretrained(), or pin the files present with `python -m eegfm_bench.models.checkpoints pin "
            f"{folder} --backbone <name>`")
    entries = read_manifest(mpath)
    if len(entries) != 1:
        raise CheckpointError(f"{mpath} must hold exactly one checkpoint entry, found {sorted(entries)}")
    return next(iter(entries.values()))


def resolve(pretrained: str, manifest: str | Path | None = None, cache_dir: str | Path | None = None,
            allow_hub: bool | None = None) -> ResolvedCheckpoint:
    """Locate and checksum-verify the weights named by ``pretrained``.

    Parameters
    ----------
    pretrained : str
        A checkpoint id from the manifest, or a folder written by :func:`save_pretrained` (absolute,
        relative to the working directory, or relative to :func:`checkpoint_dir`).
    manifest : path, optional
        Central manifest (default ``checkpoints/manifest.json``).
    cache_dir : path, optional
        Hugging Face cache to look in (default: huggingface_hub's).
    allow_hub : bool, optional
        Force (``True``) or forbid (``False``) contacting the hub; default: allowed unless
        ``HF_HUB_OFFLINE`` is set, and only if a 2-s TCP probe of the endpoint succeeds.

    Returns
    -------
    ResolvedCheckpoint

    Raises
    ------
    CheckpointNotFoundError
        Files missing; the message names the exact path to put them in and where to get them.
    ChecksumError
        sha256 differs from the manifest, or is not pinned.
    CheckpointError
        A folder without a manifest, or inconsistent manifests.
    """
    manifest_path = Path(manifest) if manifest is not None else default_manifest()
    entries = read_manifest(manifest_path)
    root = checkpoint_dir()

    if pretrained in entries:
        entry = entries[pretrained]
        local = root / pretrained
        path = local / entry.weights
        origin = "local"
        if not path.is_file():
            cached = try_to_load_from_cache(pretrained, entry.weights,
                                            cache_dir=str(cache_dir) if cache_dir is not None else None)
            if isinstance(cached, str) and os.path.isfile(cached):
                path, origin = Path(cached), "hf-cache"
            else:
                if allow_hub is False or (allow_hub is None and _hub_offline()):
                    raise _not_found(entry, local, f"not in {local} nor in the Hugging Face cache, and the hub "
                                                   "is off limits (HF_HUB_OFFLINE is set)")
                ok, why = _hub_reachable()
                if not ok:
                    raise _not_found(entry, local, f"not in {local} nor in the Hugging Face cache, and {why}")
                try:
                    path = Path(huggingface_hub.hf_hub_download(pretrained, entry.weights, etag_timeout=5,
                                                cache_dir=str(cache_dir) if cache_dir is not None else None))
                except Exception as exc:  # network / auth / missing file: one clear error
                    raise _not_found(entry, local, f"download failed ({exc.__class__.__name__}: {exc})") from exc
                origin = "hub"
        sha = _verify(entry, path, manifest_path)
        return ResolvedCheckpoint(pretrained, entry.backbone, path, sha, origin, compatible=entry.compatible,
                                  montage=entry.montage)

    tried = [Path(pretrained).expanduser()]
    if not tried[0].is_absolute():
        tried.append(root / pretrained)
    folder = next((p for p in tried if p.is_dir()), None)
    if folder is None:
        known = ", ".join(sorted(entries)) or "(none)"
        raise CheckpointNotFoundError(
            f"pretrained={pretrained!r} is not a checkpoint id in {manifest_path} (known: {known}) and no folder "
            f"exists at {' or '.join(str(p.resolve()) for p in tried)}.\nfix: give an id from the manifest, or "
            "the path of a folder written by save_pretrained()")
    entry = _folder_entry(folder)
    if entry.id in entries and entries[entry.id].sha256 not in (None, entry.sha256):
        raise ChecksumError(f"checkpoint {entry.id!r}: {folder / MANIFEST_NAME} pins sha256 {entry.sha256} but "
                            f"{manifest_path} pins {entries[entry.id].sha256}; fix: keep one version")
    path = folder / entry.weights
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint folder {folder.resolve()} lacks its weights file {path.name} "
                                      f"(expected at {path.resolve()}); fix: copy the complete folder")
    sha = _verify(entry, path, folder / MANIFEST_NAME)
    config = None
    if (folder / CONFIG_NAME).is_file():
        config = json.loads((folder / CONFIG_NAME).read_text())
    return ResolvedCheckpoint(entry.id, entry.backbone, path, sha, "local", config, compatible=entry.compatible,
                              montage=entry.montage)


# ------------------------------------------------------------------------------------------- loading
def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a flat ``{name: tensor}`` state dict from ``.safetensors`` or (``weights_only``) ``.bin``/``.pt``.

    Raises
    ------
    CheckpointError
        If the file holds anything other than a flat mapping of tensors (e.g. a nested ``{"model": ...}``
        training checkpoint: convert it to braindecode's format first).
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        state = load_file(str(path), device="cpu")
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        top = sorted(state)[:10] if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} is not a flat state dict of tensors (top level: {top}); fix: convert it to "
                              "braindecode's key format (model.state_dict()) and save it with safetensors")
    return dict(state)


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did.

    Attributes
    ----------
    checkpoint : ResolvedCheckpoint
    dropped : list of str
        Checkpoint keys removed on purpose (adapter's ``checkpoint_drop`` prefixes).
    adapted : list of str
        Notes from the adapter's ``adapt_state_dict`` (e.g. LaBraM temporal-embedding truncation).
    """

    checkpoint: ResolvedCheckpoint
    dropped: list[str] = field(default_factory=list)
    adapted: list[str] = field(default_factory=list)

    @property
    def init_tag(self) -> str:
        return self.checkpoint.init_tag


def _compare(state: dict[str, torch.Tensor], model_state: dict[str, torch.Tensor]):
    missing = [k for k in model_state if k not in state]
    unexpected = [k for k in state if k not in model_state]
    shapes = [(k, tuple(state[k].shape), tuple(model_state[k].shape))
              for k in model_state if k in state and state[k].shape != model_state[k].shape]
    return shapes, missing, unexpected


def _mismatch_message(shapes, missing, unexpected, where: str, limit: int = 40) -> str:
    def block(title: str, items: list[str]) -> str:
        if not items:
            return ""
        more = f"\n    ... and {len(items) - limit} more" if len(items) > limit else ""
        return f"\n  {title} ({len(items)}):\n    " + "\n    ".join(items[:limit]) + more

    return (f"checkpoint {where} does not match the model (strict loading):"
            + block("shape differs", [f"{k}: checkpoint {a} vs model {b}" for k, a, b in shapes])
            + block("missing in checkpoint", missing) + block("unexpected in checkpoint", unexpected))


def load_pretrained(adapter: BackboneAdapter, pretrained: str, manifest: str | Path | None = None,
                    cache_dir: str | Path | None = None, allow_hub: bool | None = None) -> str:
    """Load verified weights into ``adapter.model`` (strict) and return the result rows' init tag.

    Same as :func:`load_checkpoint` (see it for parameters and errors); the full :class:`LoadReport` is kept
    as ``adapter.load_report`` and its dropped keys / adaptations are logged at INFO level.

    Returns
    -------
    str
        ``pretrained:<id>@<first 12 hex of sha256>``.
    """
    report = load_checkpoint(adapter, pretrained, manifest=manifest, cache_dir=cache_dir, allow_hub=allow_hub)
    adapter.load_report = report
    log.info("loaded %s into %s from %s (%s); dropped %s; adapted %s", report.checkpoint.id, adapter.name,
             report.checkpoint.weights_path, report.checkpoint.origin, report.dropped or "nothing",
             report.adapted or "nothing")
    return report.init_tag


def load_checkpoint(adapter: BackboneAdapter, pretrained: str, manifest: str | Path | None = None,
                    cache_dir: str | Path | None = None, allow_hub: bool | None = None) -> LoadReport:
    """Load verified weights into ``adapter.model`` with ``strict=True``.

    Parameters
    ----------
    adapter : BackboneAdapter
        Built for the dataset (channels, window length, architecture kwargs).
    pretrained : str
        Checkpoint id or folder (see :func:`resolve`).
    manifest, cache_dir, allow_hub
        See :func:`resolve`.

    Returns
    -------
    LoadReport
        With ``init_tag`` for the result rows.

    Raises
    ------
    CheckpointError
        The checkpoint belongs to another backbone, or the adapter refuses it (``checkpoint_refusal``, e.g. an
        ST-EEGFormer build whose channel-embedding slots differ from the checkpoint's).
    StateDictMismatchError
        Any key or shape differs after the documented drops / adaptations; every layer is named.
    CheckpointNotFoundError, ChecksumError
        See :func:`resolve`.
    """
    ck = resolve(pretrained, manifest=manifest, cache_dir=cache_dir, allow_hub=allow_hub)
    if adapter.name not in (ck.backbone, *ck.compatible):
        raise CheckpointError(f"checkpoint {ck.id!r} holds {ck.backbone!r} weights; the backbone is "
                              f"{adapter.name!r}; fix: choose a {adapter.name} checkpoint")
    wants = getattr(adapter, "input_montage", "monopolar")
    if ck.montage != wants:
        raise CheckpointError(
            f"checkpoint {ck.id!r} was trained on {ck.montage} channels but {adapter.name} feeds {wants} channels: its "
            f"channel tokens would mean other signals (tensor shapes can match by accident). fix: use the "
            f"{ck.backbone} backbone, which builds the {ck.montage} input these weights expect")
    refusal = getattr(adapter, "checkpoint_refusal", None)
    why = refusal(ck.config) if callable(refusal) else None
    if why:
        raise CheckpointError(f"checkpoint {ck.id!r} cannot be loaded into this {adapter.name} build: {why}")
    state = read_state_dict(ck.weights_path)
    model_state = adapter.model.state_dict()
    dropped = []
    for prefix in getattr(adapter, "checkpoint_drop", ()):
        for k in [k for k in state if k.startswith(prefix) and k not in model_state]:
            dropped.append(k)
            del state[k]
    adapted: list[str] = []
    if hasattr(adapter, "adapt_state_dict"):
        state, adapted = adapter.adapt_state_dict(state)
    shapes, missing, unexpected = _compare(state, model_state)
    if shapes or missing or unexpected:
        msg = _mismatch_message(shapes, missing, unexpected, f"{ck.id!r} ({ck.weights_path})")
        saved = ck.config or {}  # the folder's config.json as read back (a hub folder's may hold other keys)
        ours = {"arch_kwargs": adapter.arch_kwargs, "n_chans": len(adapter.ch_names), "n_times": adapter.n_times}
        theirs = {"arch_kwargs": saved.get("arch_kwargs"), "n_chans": len(saved.get("ch_names", [])) or None,
                  "n_times": saved.get("n_times")}
        if saved:
            msg += f"\n  checkpoint config: {theirs}\n  model config:      {ours}"
        hint = getattr(adapter, "checkpoint_hint", "")
        raise StateDictMismatchError(msg + (f"\nhint: {hint}" if hint else "")
                                     + "\nfix: build the backbone with the checkpoint's architecture arguments",
                                     shapes, missing, unexpected)
    fresh = {k: v.detach().clone() for k, v in adapter.model.state_dict().items() if torch.is_floating_point(v)}
    adapter.model.load_state_dict(state, strict=True)
    refuse_untrained(adapter, fresh, ck.id)
    return LoadReport(ck, dropped, adapted)


def refuse_untrained(adapter: BackboneAdapter, fresh_state: dict[str, torch.Tensor], checkpoint_id: str) -> None:
    """Refuse "pretrained" weights that equal the adapter's own random initialisation.

    ``fresh_state`` is the model's state just before loading: the random init of the current seed (``FMClassifier``
    builds the backbone under ``torch.manual_seed(init_seed)``). A checkpoint whose every floating-point tensor equals
    it is a saved random init (e.g. ``save_pretrained`` called before training), and its results would be labelled
    ``pretrained:`` while being ``init=random``.

    Raises
    ------
    CheckpointError
        Naming the checkpoint and the fix.
    """
    loaded = adapter.model.state_dict()
    compared = [k for k, v in fresh_state.items() if k in loaded and loaded[k].shape == v.shape and v.numel() > 1]
    if compared and all(torch.equal(loaded[k].detach().cpu(), fresh_state[k].cpu()) for k in compared):
        raise CheckpointError(
            f"checkpoint {checkpoint_id!r}: all {len(compared)} weight tensors equal a fresh random initialisation of "
            f"{adapter.name} with this seed: these are untrained weights, and results would be labelled pretrained. "
            "fix: save the weights after pretraining, or run without `pretrained` (init=random)")


# ------------------------------------------------------------------------------------------- random init
class RandomInitError(CheckpointError):
    """A "random" initialisation shares parameter values with a pretrained checkpoint.

    Attributes
    ----------
    equal : list of str
        Parameter names whose tensors equal the checkpoint's exactly.
    """

    def __init__(self, message: str, equal=()):
        super().__init__(message)
        self.equal = list(equal)


def checkpoint_state(adapter: BackboneAdapter, pretrained: str, manifest: str | Path | None = None,
                     cache_dir: str | Path | None = None, allow_hub: bool | None = None) -> dict[str, torch.Tensor]:
    """The verified checkpoint's state dict in the adapter's key names (its ``adapt_state_dict`` applied)."""
    ck = resolve(pretrained, manifest=manifest, cache_dir=cache_dir, allow_hub=allow_hub)
    state = read_state_dict(ck.weights_path)
    if hasattr(adapter, "adapt_state_dict"):
        state, _ = adapter.adapt_state_dict(state)
    return state


def check_random_init(adapter: BackboneAdapter, checkpoint_state: dict[str, torch.Tensor],
                      ignore: tuple[str, ...] = ()) -> None:
    """Raise unless every parameter of a randomly initialised adapter differs from the checkpoint's.

    Matched fully random initialisation (paper 001 §3.6, §4.2.2) compares a pretrained encoder with *the same
    architecture* re-initialised: every parameter must come from the random initialiser (``FMClassifier`` builds
    the backbone under ``torch.manual_seed(init_seed)``), none from the checkpoint. This checks it tensor by
    tensor: a parameter of ``adapter.model`` that equals the checkpoint tensor of the same name and shape exactly
    means pretrained values leaked into the "random" model (or the checkpoint itself is untrained there).

    Parameters
    ----------
    adapter : BackboneAdapter
        The randomly initialised backbone.
    checkpoint_state : dict
        The pretrained weights in the adapter's key names (:func:`checkpoint_state`).
    ignore : tuple of str
        Parameter-name prefixes to skip (e.g. parameters a checkpoint never trained), each reported by the caller.

    Raises
    ------
    RandomInitError
        Naming every parameter equal to the checkpoint's (and, for constant tensors, their value).
    ValueError
        If the checkpoint shares no parameter name and shape with the adapter (wrong checkpoint: nothing to
        compare).
    """
    compared, equal = 0, []
    for name, p in adapter.model.named_parameters():
        if any(name.startswith(pre) for pre in ignore):
            continue
        ref = checkpoint_state.get(name)
        if ref is None or tuple(ref.shape) != tuple(p.shape):
            continue
        compared += 1
        if torch.equal(p.detach().cpu().to(ref.dtype), ref.cpu()):
            flat = ref.flatten()
            const = f" (all {flat[0].item():g})" if flat.numel() and bool((flat == flat[0]).all()) else ""
            equal.append(name + const)
    if compared == 0:
        raise ValueError(f"check_random_init: the checkpoint shares no parameter (name and shape) with "
                         f"{adapter.name}; fix: pass the state dict of a checkpoint of this architecture")
    if equal:
        raise RandomInitError(
            f"{adapter.name}: {len(equal)} of {compared} parameters of the random initialisation equal the "
            f"checkpoint's: {equal[:10]}{' ...' if len(equal) > 10 else ''}; the 'random' model is not fully "
            "re-initialised (fix: build it without `pretrained`, under its own init_seed)", equal)


# ------------------------------------------------------------------------------------------- saving
def save_pretrained(adapter: BackboneAdapter, folder: str | Path, checkpoint_id: str | None = None,
                    manifest: str | Path | None = None, overwrite: bool = False, notes: str = "") -> CheckpointEntry:
    """Write ``model.safetensors``, ``config.json`` and a one-entry ``manifest.json`` (sha256) to ``folder``.

    Parameters
    ----------
    adapter : BackboneAdapter
        Its braindecode model's state dict is saved (braindecode key names, as hub checkpoints).
    folder : path
        Target folder (created).
    checkpoint_id : str, optional
        Id recorded in the manifest and in init tags (default: the folder's name).
    manifest : path, optional
        Also add the entry to this central manifest (e.g. ``checkpoints/manifest.json``).
    overwrite : bool
        Replace existing weights in ``folder`` (default: refuse).
    notes : str
        Free text stored in the manifest entry.

    Returns
    -------
    CheckpointEntry

    Raises
    ------
    FileExistsError
        ``folder`` already holds weights and ``overwrite`` is False.
    CheckpointError
        The model carries unmerged LoRA layers (merge them first: ``peft`` ``merge_and_unload``).
    TypeError
        An architecture argument is not JSON-serialisable.
    """
    folder = Path(folder)
    weights = folder / WEIGHTS_NAME
    if weights.exists() and not overwrite:
        raise FileExistsError(f"{weights} exists; fix: pass overwrite=True or choose another folder")
    state = {k: v.detach().cpu().contiguous() for k, v in adapter.model.state_dict().items()}
    lora = [k for k in state if "lora_" in k or ".base_layer." in k]
    if lora:
        raise CheckpointError(f"the model holds unmerged LoRA weights ({lora[:3]} ...); fix: merge them into the "
                              "base weights (peft merge_and_unload) before saving")
    config = {
        "backbone": adapter.name,
        "ch_names": list(adapter.ch_names),
        "n_times": adapter.n_times,
        "n_outputs": adapter.n_outputs,
        "arch_kwargs": dict(adapter.arch_kwargs),
        "preprocessing": adapter.preprocessing.to_dict(),
        "braindecode_version": braindecode.__version__,
        "torch_version": torch.__version__,
    }
    try:
        config_text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    except TypeError as exc:
        raise TypeError(f"cannot save the config of {adapter.name}: {exc}; fix: pass architecture arguments "
                        "as JSON values (numbers, strings, lists)") from exc
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(weights) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt", "backbone": adapter.name})
    _atomic_write_text(folder / CONFIG_NAME, config_text)
    entry = CheckpointEntry(
        id=checkpoint_id or folder.resolve().name, backbone=adapter.name, weights=WEIGHTS_NAME,
        sha256=sha256_file(weights),
        source=f"save_pretrained {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}", notes=notes,
        montage=getattr(adapter, "input_montage", "monopolar"))
    write_manifest({entry.id: entry}, folder / MANIFEST_NAME)
    if manifest is not None:
        add_manifest_entry(entry, manifest)
    return entry


def load_adapter(folder: str | Path, manifest: str | Path | None = None) -> tuple[BackboneAdapter, LoadReport]:
    """Rebuild the adapter recorded in a :func:`save_pretrained` folder and load its weights (strict).

    Raises
    ------
    CheckpointError
        If the folder has no ``config.json`` (e.g. a hub checkpoint: build the adapter for your data, then
        call :func:`load_pretrained`).
    """
    ck = resolve(str(folder), manifest=manifest, allow_hub=False)
    if ck.config is None:
        raise CheckpointError(f"{folder} has no {CONFIG_NAME}; fix: build the adapter for your data and call "
                              "load_pretrained(adapter, ...)")
    saved = ck.config  # the config.json save_pretrained wrote, read back
    cls = BACKBONES.get(saved["backbone"])
    adapter = cls(saved["ch_names"], saved["n_times"], saved.get("n_outputs", 2), **saved.get("arch_kwargs", {}))
    return adapter, load_checkpoint(adapter, str(folder), manifest=manifest, allow_hub=False)


def build_backbone(name: str, ch_names: list[str], n_times: int, n_outputs: int = 2, pretrained: str | None = None,
                   **kwargs: Any) -> tuple[BackboneAdapter, str]:
    """Build a registered backbone and optionally load pretrained weights.

    Returns
    -------
    adapter : BackboneAdapter
    init : str
        The result row's init tag: ``random`` or ``pretrained:<id>@<sha12>``.
    """
    adapter = BACKBONES.get(name)(ch_names, n_times, n_outputs, **kwargs)
    if pretrained is None:
        return adapter, init_tag()
    return adapter, load_pretrained(adapter, pretrained)


def init_tag(pretrained: str | None = None, sha256: str | None = None) -> str:
    """Result-row ``init`` string: ``random``, or ``pretrained:<id>@<first 12 hex chars of sha256>``.

    Raises
    ------
    ValueError
        If an id is given without a valid 64-hex sha256.
    """
    if pretrained is None:
        if sha256 is not None:
            raise ValueError("init_tag: sha256 given without a checkpoint id")
        return "random"
    if sha256 is None or not _SHA_RE.match(sha256):
        raise ValueError(f"init_tag: checkpoint {pretrained!r} needs its 64-hex sha256, got {sha256!r}")
    return f"pretrained:{pretrained}@{sha256[:12]}"


# ------------------------------------------------------------------------------------------- CLI
def _pin(target: str, manifest: Path, backbone: str | None) -> str:
    entries = read_manifest(manifest)
    if target in entries:
        entry = entries[target]
        local = checkpoint_dir() / target / entry.weights
        cached = try_to_load_from_cache(target, entry.weights)
        path = local if local.is_file() else (Path(cached) if isinstance(cached, str) else None)
        if path is None:
            raise _not_found(entry, checkpoint_dir() / target, "nothing to pin")
        sha = sha256_file(path)
        entries[target] = CheckpointEntry(**{**asdict(entry), "sha256": sha})
        write_manifest(entries, manifest)
        return f"pinned {target} = {sha} ({path}) in {manifest}"
    folder = Path(target)
    if not folder.is_dir():
        raise CheckpointNotFoundError(f"{target!r} is neither an id in {manifest} nor a folder")
    if backbone is None:
        raise SystemExit("pin <folder> needs --backbone NAME")
    weights = next((folder / n for n in (WEIGHTS_NAME, "pytorch_model.bin") if (folder / n).is_file()), None)
    if weights is None:
        raise CheckpointNotFoundError(f"{folder} has neither {WEIGHTS_NAME} nor pytorch_model.bin")
    entry = CheckpointEntry(id=folder.resolve().name, backbone=backbone, weights=weights.name,
                            sha256=sha256_file(weights), source="pinned by hand")
    write_manifest({entry.id: entry}, folder / MANIFEST_NAME)
    return f"pinned {entry.id} = {entry.sha256} in {folder / MANIFEST_NAME}"


def main(argv: list[str] | None = None) -> int:
    """``python -m eegfm_bench.models.checkpoints {list,pin,sha256}``."""
    p = argparse.ArgumentParser(prog="python -m eegfm_bench.models.checkpoints", description=__doc__.split("\n")[0])
    p.add_argument("--manifest", type=Path, default=None)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list manifest entries and whether their files are present locally")
    pp = sub.add_parser("pin", help="record the sha256 of the files present for an id or a folder")
    pp.add_argument("target")
    pp.add_argument("--backbone", default=None)
    ps = sub.add_parser("sha256", help="print a file's sha256")
    ps.add_argument("file", type=Path)
    args = p.parse_args(argv)
    manifest = args.manifest or default_manifest()
    if args.cmd == "list":
        for cid, e in read_manifest(manifest).items():
            present = (checkpoint_dir() / cid / e.weights).is_file()
            print(f"{cid:45s} {e.backbone:8s} sha256={e.sha256 or 'UNPINNED'} local={'yes' if present else 'no'}")
    elif args.cmd == "pin":
        print(_pin(args.target, manifest, args.backbone))
    else:
        print(sha256_file(args.file))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
