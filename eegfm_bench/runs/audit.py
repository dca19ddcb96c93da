"""``eegfm-bench audit``: the PhysioTRACE provenance audit (paper 000) over an embeddings npz; resumable.

The audit itself (:func:`eegfm_bench.provenance.audit.audit_embeddings`) runs no network: it reads cached embeddings
(e.g. those of the provenance demo's encoder, extracted by ``Trainer.predict``), so the command has no ``trainer:``
section. The config is typed (:class:`AuditCommand` plus every :class:`~eegfm_bench.config.audit.AuditConfig`
field at the top level); unknown keys are refused with the close matches.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np

from eegfm_bench.config import command_parser, load_typed, typed
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.provenance.audit import AuditReport, audit_embeddings
from eegfm_bench.config.audit import AuditConfig
from eegfm_bench.provenance.views import pair_views
from eegfm_bench.config.audit import AuditCommand


NULLABLE = {f.name for f in dataclasses.fields(AuditConfig) if f.default is None}


def audit_parser():
    return command_parser("eegfm-bench audit", AuditCommand, trainer=False, description=__doc__, extra=(AuditConfig,))


_NPZ_KEYS = ("emb", "y", "provenance", "subject", "record", "split")


def load_audit_config(source, args: Sequence[str] = ()) -> tuple[AuditCommand, AuditConfig]:
    """Read an audit config (YAML path or mapping, plus dotted overrides) and return its two typed, frozen parts:
    the inputs and outputs (:class:`AuditCommand`) and the audit's settings (every other top-level key,
    :class:`~eegfm_bench.config.audit.AuditConfig`), before any file is read.

    Raises
    ------
    ConfigError
        Unknown keys (with close matches), wrong types.
    ValueError
        ``embeddings`` / ``out_dir`` missing, or a setting :class:`~eegfm_bench.config.audit.AuditConfig`
        refuses.
    """
    own = {f.name for f in dataclasses.fields(AuditCommand)}
    kept: dict = {}

    def prepare(parsed: dict) -> dict:  # the command's own keys; the others are the audit's settings
        kept.update({k: v for k, v in parsed.items() if v is not None or k in NULLABLE})
        return {k: v for k, v in kept.items() if k in own}

    cmd = load_typed(audit_parser(), AuditCommand, source, args, prepare=prepare)
    raw = kept
    for key, value in (("embeddings", cmd.embeddings), ("out_dir", cmd.out_dir)):
        if not value:
            raise ValueError(f"audit config needs {key!r}; fix: add {key}: <path> to the audit config")
    return cmd, typed(AuditConfig, {k: v for k, v in raw.items() if k not in own})


def run_audit(config, args: Sequence[str] = (), *, wait: bool = True) -> AuditReport:
    """Run (or resume) an audit described by a config dict; the ``eegfm-bench audit`` hook.

    Parameters
    ----------
    config : path or dict
        A YAML file or mapping (typed: :class:`AuditCommand` plus every
        :class:`~eegfm_bench.config.audit.AuditConfig` field at the top level; read by
        :func:`load_audit_config`). ``embeddings``: path to an ``.npz`` with keys ``emb``, ``y``, ``provenance``,
        ``subject``, ``record``, ``split`` (shapes as in :func:`audit_embeddings`); ``out_dir``: output folder; optional
        ``paired: true`` when ``emb`` is long-format ``(n_rows, d)`` with one row per (window, view) — rows are then
        paired by :func:`~eegfm_bench.provenance.views.pair_views` on (record, order), with optional ``views``
        giving the view order; every other key is an :class:`AuditConfig` field.
    args : sequence of str
        Dotted overrides (``--n_boot 2000``).
    wait : bool
        When another process writes the same ``out_dir``: wait (default), or raise
        :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``; :func:`eegfm_bench.locks.out_dir_lock`).

    Returns
    -------
    AuditReport
        Also written to ``out_dir/audit_<hash16>.json`` and ``.md``.

    Raises
    ------
    ValueError
        If ``embeddings``/``out_dir`` are missing, a setting is refused, the npz lacks a key, paired rows disagree
        in target, subject or split, or any :func:`audit_embeddings` check fails.
    FileNotFoundError
        If the npz does not exist.
    """
    cmd, audit_cfg = load_audit_config(config, args)
    path = Path(cmd.embeddings)
    if not path.exists():
        raise FileNotFoundError(f"embeddings file {path} not found; fix: cache embeddings first")
    with np.load(path, allow_pickle=False) as f:
        missing = [k for k in _NPZ_KEYS if k not in f.files]
        if missing:
            raise ValueError(f"{path} lacks keys {missing}; it needs {list(_NPZ_KEYS)}")
        arr = {k: f[k] for k in _NPZ_KEYS}
    if cmd.paired:
        pv = pair_views(arr["emb"], arr["provenance"], arr["record"], views=cmd.views)
        first = pv.rows[:, 0]
        for k in ("y", "subject", "record", "split"):
            a = arr[k]
            if not np.all(a[pv.rows] == a[first][:, None]):
                raise ValueError(f"views are not paired: {k!r} differs between the views of some window; fix: "
                                 "give every view of a window the same target, subject, record and split")
        arr = {"emb": pv.emb, "provenance": np.array(pv.views), **{k: arr[k][first] for k in
                                                                    ("y", "subject", "record", "split")}}
    with out_dir_lock(cmd.out_dir, "audit", wait=wait):
        return audit_embeddings(arr["emb"], arr["y"], arr["provenance"], arr["subject"], arr["record"], arr["split"],
                         audit_cfg, out_dir=Path(cmd.out_dir))


# ----------------------------------------------------------------------------------------------------------------
# markdown
