"""Model catalogue as data (``catalogue.yaml``): size, input, channel contract, hub ids, pretraining corpora.

braindecode keeps a machine-readable ``models/summary.csv``; this is the benchmark's equivalent, restricted to
the registered backbones and extended with what the controls need: each published checkpoint's pretraining
corpora, for gate (iii) of paper 001 §3.6 ("the published pretraining inventory shows no overlap with the
evaluation cohort or a closely related source distribution").

* :func:`load_catalogue` reads and validates the YAML (every registered backbone has an entry and vice versa);
* :func:`catalogue_table` renders it as Markdown (``eegfm-bench models``), joined with each adapter's declared
  preprocessing (:class:`~eegfm_bench.data.preprocessing.Preprocessing`);
* :func:`pretraining_corpora` / :func:`pretraining_overlap` answer gate (iii), using the source families of
  :data:`eegfm_bench.models.catalogue.RELATED_SOURCES` (TUAB inside TUEG, ...).
"""
from __future__ import annotations

import copy
import re
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from eegfm_bench.models.backbones import BACKBONES, primary_backbones
from eegfm_bench.models.closed_form import CLOSED_FORM
from eegfm_bench.models.heads import HEADS

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")
REQUIRED = ("display", "braindecode_class", "kind", "reference", "params", "reference_input", "tokens", "sfreq",
            "window_s", "channel_contract", "variable_channels", "hub_ids", "pretraining")


class CatalogueError(ValueError):
    """The catalogue file is malformed or out of step with the registered backbones."""


class IncompleteInventoryError(ValueError):
    """A model's published pretraining inventory is only partly listed, so "no overlap" cannot be certified."""


@lru_cache(maxsize=4)
def _read(path: str) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("models"), dict):
        raise CatalogueError(f"{path}: expected a mapping with `format: 1` and `models:`")
    return data["models"]


def load_catalogue(path: str | Path | None = None, check_registry: bool = True) -> dict[str, dict]:
    """Read the catalogue: ``{backbone name: entry}``.

    Parameters
    ----------
    path : path, optional
        Default: ``eegfm_bench/models/catalogue.yaml``.
    check_registry : bool
        Require exactly one entry per registered backbone (default ``True``).

    Returns
    -------
    dict
        Each entry holds ``display``, ``braindecode_class``, ``kind``, ``reference``, ``params``
        (``braindecode`` and ``backbone`` parameter counts), ``reference_input``, ``tokens``, ``sfreq`` (Hz),
        ``window_s`` (s), ``channel_contract``, ``variable_channels``, ``hub_ids`` and ``pretraining``
        (``None`` for supervised baselines, else ``corpora``, ``complete``, ``source`` and optionally per-checkpoint
        ``checkpoints``). A copy: callers may modify it.

    Raises
    ------
    CatalogueError
        Missing fields, or entries and registered backbones that do not match (both named).
    """
    models = copy.deepcopy(_read(str(path or CATALOGUE_PATH)))
    for name, info in models.items():  # the catalogue's data on one model (read from its YAML file)
        missing = [k for k in REQUIRED if k not in info]
        if missing:
            raise CatalogueError(f"catalogue entry {name!r} lacks {missing}")
        pre = info["pretraining"]
        if pre is not None and not {"corpora", "complete", "source"} <= set(pre):
            raise CatalogueError(f"catalogue entry {name!r}: pretraining needs corpora, complete and source")
    if check_registry:
        registered = set(primary_backbones())
        extra, absent = sorted(set(models) - registered), sorted(registered - set(models))
        if extra or absent:
            raise CatalogueError(f"catalogue and registry differ: entries without a backbone {extra}, backbones "
                                 f"without an entry {absent}; fix: edit {CATALOGUE_PATH.name}")
    return models


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} K"


def catalogue_table(path: str | Path | None = None) -> str:
    """The catalogue as one Markdown table (one row per registered backbone).

    Columns: model, kind, parameters (backbone as used / braindecode default build), sampling rate (Hz), window
    (s), band (Hz) and unit (from the adapter's declared preprocessing), tokens, channel contract, variable
    channels, hub ids, pretraining corpora (``…, see paper`` when the listed inventory is incomplete).
    """
    cat = load_catalogue(path)
    lines = ["| model | kind | params (backbone / braindecode) | sfreq (Hz) | window (s) | band (Hz) | unit | tokens | "
             "channels | variable | hub ids | pretraining corpora |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in primary_backbones():
        e = cat[name]
        p = BACKBONES.get(name).preprocessing
        if p.l_freq is None and p.h_freq is None:
            band = "none"
        elif p.l_freq is None:
            band = f"< {p.h_freq:g}"
        elif p.h_freq is None:
            band = f"> {p.l_freq:g}"
        else:
            band = f"{p.l_freq:g}–{p.h_freq:g}"
        pre = e["pretraining"]
        if pre is None:
            corpora = "none (trained from scratch)"
        else:
            corpora = "; ".join(pre["corpora"]) or ""
            if not pre["complete"]:
                corpora = (corpora + "; " if corpora else "") + "… see paper"
        hub = ", ".join(f"`{h}`" for h in e["hub_ids"]) or "–"
        params = f"{_fmt_params(e['params']['backbone'])} / {_fmt_params(e['params']['braindecode'])}"
        cells = [f"{name} ({e['display']})", e["kind"], params, f"{e['sfreq']:g}", f"{e['window_s']:g}", band, p.unit,
                 e["tokens"], e["channel_contract"], "yes" if e["variable_channels"] else "no", hub, corpora]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def heads_table() -> str:
    """The registered heads (:data:`~eegfm_bench.models.heads.HEADS`, plug-ins included) and the closed-form ones
    (:data:`~eegfm_bench.models.closed_form.CLOSED_FORM`) as one Markdown table: head, kind, whether it takes any
    number of tokens (channel-removal conditions apply: :meth:`~eegfm_bench.models.heads.PoolingHead.takes_any_token_count`
    at its default settings), whether it is a pooling of the probes and the controls (a parameter-free
    ``token_pooling``), and the first line of its docstring. What ``eegfm-bench models`` prints under the backbones:
    the one list of head names, so that docs and config help need not repeat it."""
    lines = ["| head | kind | any token count (default settings) | probe / control pooling | what it does |", "|---|---|---|---|---|"]
    for name in HEADS.names():
        cls = HEADS.get(name)
        doc = (cls.__doc__ or "").strip().split("\n")[0].replace("``", "`")
        lines.append(f"| {name} | trained | {'yes' if cls.takes_any_token_count() else 'no'} | "
                     f"{'yes' if cls.token_pooling is not None else 'no'} | {doc} |")
    for name in CLOSED_FORM.names():
        cf = CLOSED_FORM.get(name)
        lines.append(f"| {name} | closed form ({cf.regime}), stored as a {cf.carrier} head | "
                     f"{'yes' if HEADS.get(cf.carrier).takes_any_token_count() else 'no'} | no | "
                     f"solved on the cached tokens; settings: {', '.join(cf.settings)} |")
    return "\n".join(lines)


def _pretraining_entry(model: str, checkpoint: str | None, path: str | Path | None) -> tuple[dict | None, list[str]]:
    """``(pretraining entry, listed corpora of checkpoint or of the model)``; the entry is None for baselines.

    Raises
    ------
    KeyError
        Unknown model or checkpoint (lists the known ones).
    """
    cat = load_catalogue(path, check_registry=False)
    if model not in cat:
        raise KeyError(f"no catalogue entry {model!r}; known: {sorted(cat)}")
    pre = cat[model]["pretraining"]
    if pre is None:
        return None, []
    if checkpoint is None:
        return pre, list(pre["corpora"])
    per = pre.get("checkpoints") or {}
    if checkpoint in per:
        return pre, list(per[checkpoint])
    if checkpoint in cat[model]["hub_ids"]:
        return pre, list(pre["corpora"])
    raise KeyError(f"{model}: unknown checkpoint {checkpoint!r}; known: {cat[model]['hub_ids']}")


def pretraining_corpora(model: str, checkpoint: str | None = None, path: str | Path | None = None) -> list[str] | None:
    """The listed pretraining corpora of ``model`` (of one checkpoint if given), or ``None`` when incomplete.

    ``None`` is what :class:`eegfm_bench.controls.gates.ClaimEvidence` takes for an unknown inventory (gate iii
    then reports ``missing``). Supervised baselines return ``[]``.

    Raises
    ------
    KeyError
        Unknown model or checkpoint (lists the known ones).
    """
    pre, corpora = _pretraining_entry(model, checkpoint, path)
    if pre is None:
        return []
    return corpora if pre["complete"] else None


def pretraining_overlap(model: str, dataset_aliases: Sequence[str] | str, checkpoint: str | None = None,
                        assume_complete: bool = False, path: str | Path | None = None) -> list[str]:
    """Pretraining corpora of ``model`` that are, contain, or share a source family with the evaluation dataset.

    Paper 001 §3.6 gate (iii). Matching is :func:`eegfm_bench.controls.gates.pretraining_overlap` applied to each
    alias (same dataset, named as a word of the corpus name, or same source family such as TUAB ⊂ TUEG).

    Parameters
    ----------
    model : str
        Registered backbone name.
    dataset_aliases : str or sequence of str
        Names of the evaluation dataset (e.g. a task's ``pretraining_aliases``:
        ``("eegmmidb", "physionet-mi", ...)``).
    checkpoint : str, optional
        Restrict to one published checkpoint (default: every checkpoint of the model).
    assume_complete : bool
        Treat an incomplete inventory as complete (default ``False``).

    Returns
    -------
    list of str
        The overlapping corpus names, in catalogue order (empty: no listed overlap; supervised baselines: always
        empty).

    Raises
    ------
    IncompleteInventoryError
        If nothing overlaps but the catalogue lists only part of the model's inventory ("see paper"): absence
        of evidence cannot pass gate (iii) unless ``assume_complete=True``.
    KeyError
        Unknown model or checkpoint.
    """
    pre, corpora = _pretraining_entry(model, checkpoint, path)
    if pre is None:
        return []
    aliases = [dataset_aliases] if isinstance(dataset_aliases, str) else list(dataset_aliases)
    hits = {corpus for alias in aliases for corpus, _ in corpus_overlap(corpora, alias)}
    out = [c for c in corpora if c in hits]
    if not out and not pre["complete"] and not assume_complete:
        raise IncompleteInventoryError(
            f"{model}: none of the listed pretraining corpora {corpora} overlaps {aliases}, but the listed inventory "
            f"is incomplete ({pre['source']}); gate (iii) cannot be certified; fix: complete the entry in "
            f"{CATALOGUE_PATH.name} from the paper, or pass assume_complete=True and report it")
    return out


# ------------------------------------------------------------------ pretraining overlap (paper 001 gate iii)
RELATED_SOURCES: dict[str, tuple[str, ...]] = {
    "tuh": ("tuh", "tueg", "tuheeg", "tuhcorpus", "tuab", "tuar", "tuev", "tusz", "tuep", "tusl",
            "templeuniversityhospital"),
    "chbmit": ("chbmit", "chb", "chbmitscalpeeg"),
    "sleepedf": ("sleepedf", "sleepedfx", "sleepcassette", "sleeptelemetry"),
    "ds004504": ("ds004504", "miltiadous"),
    "caueeg": ("caueeg",),
    "ds003490": ("ds003490",),
    "shhs": ("shhs",),
    "seed": ("seed", "seediv", "seedv", "seedvig"),
}
"""Source families for gate (iii): names in one family are treated as the same or a closely related source
distribution (§3.6 (iii)). Normalised names (lower case, alphanumerics only). Extend via ``related=``."""


def normalize_name(name: str) -> str:
    """Lower-case alphanumerics only: ``"CHB-MIT"`` → ``"chbmit"``, ``"TUH EEG"`` → ``"tuheeg"``."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _family(name: str, related: Mapping[str, Sequence[str]]) -> str | None:
    """Source family of ``name``: equal to a member, or containing a member of at least 6 characters
    (``"Temple University Hospital EEG"`` contains ``templeuniversityhospital``; short ids such as ``tuh`` must
    match a whole word, see :func:`corpus_overlap`)."""
    n = normalize_name(name)
    for fam, members in related.items():
        for m in {normalize_name(fam), *map(normalize_name, members)}:
            if n == m or (len(m) >= 6 and m in n):
                return fam
    return None


def corpus_overlap(pretraining_corpora: Sequence[str], evaluation_dataset: str,
                   related: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, str]]:
    """Pretraining corpora that are, contain, or share a source family with the evaluation dataset.

    Parameters
    ----------
    pretraining_corpora : sequence of str
        The model's published pretraining inventory (e.g. ``["TUEG", "SEED"]``).
    evaluation_dataset : str
        The evaluation cohort (e.g. ``"TUAB"``).
    related : mapping, optional
        Source families; default :data:`RELATED_SOURCES`.

    Returns
    -------
    list of (corpus, reason)
        Empty when no overlap is found. Reasons: ``"same dataset"``, ``"named in corpus"`` (the evaluation name
        is a word of the corpus name), ``"same source family <fam>"``.
    """
    related = RELATED_SOURCES if related is None else related
    ev = normalize_name(evaluation_dataset)
    ev_fam = _family(evaluation_dataset, related)
    hits = []
    for corpus in pretraining_corpora:
        c = normalize_name(corpus)
        words = {normalize_name(w) for w in re.split(r"[\s,;/()+]+", corpus) if w}
        if c == ev:
            hits.append((corpus, "same dataset"))
        elif ev in words:
            hits.append((corpus, "named in corpus"))
        elif ev_fam is not None and (_family(corpus, related) == ev_fam
                                     or any(_family(w, related) == ev_fam for w in words)):
            hits.append((corpus, f"same source family {ev_fam}"))
    return hits
