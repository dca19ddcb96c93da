"""The papers' grids (configs/paper/): every hyperparameter against the paper's text, and plan / check on them.

Each :class:`T` transcribes one setting: the paper, where (table / section), a phrase quoted verbatim from the seed
text, the value that phrase gives and how to read it from the resolved configs. ``test_transcription`` asserts the
configs hold that value; ``test_quote_in_seed_text`` asserts the phrase is in the paper (the seed texts at
``$EEGFM_DATA/../seeds`` or, as the README has it, ``../shared/seeds`` beside the clone; not found: the test
fails). Settings the stored text does not give (paper 003's appendices A-C are not in it) are :class:`N` entries: the
value chosen and why, asserted too. Every key of every file under configs/paper/ must be covered by one of them
(``test_every_key_is_accounted_for``).
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ROOT / "configs" / "paper"
FILES = {"003": "003_beyond_accuracy.yaml", "001": "001_negative_controls.yaml", "000": "000_physiotrace.yaml"}
SEED_TEXT = {"003": "003_ff03e98ea40aec06.txt", "001": "001_8ec365e86aaa0675.txt", "000": "000_01b5467c4132a231.txt"}
SEED_PLACES = ([Path(os.environ["EEGFM_DATA"]).resolve().parent / "seeds"] if os.environ.get("EEGFM_DATA") else []) \
    + [ROOT.parent / "shared" / "seeds"]
"""Where the seed texts are looked for: beside the data root (``$EEGFM_DATA/../seeds``), then where the README puts
them (``../shared/seeds`` next to the clone)."""


class Papers:
    """Resolved member configs of the three paper files (each member read by its command's own loader)."""

    def __init__(self, root: Path = PAPERS):
        from eegfm_bench.runs.plan.paper import load_paper, member_config

        typed_papers = {k: load_paper(root / f) for k, f in FILES.items()}
        # each member's typed config as the mapping it saves (config.yaml): the table reads the resolved values
        self.paper = {k: p.to_dict() for k, p in typed_papers.items()}
        self.cfg = {k: {m.name: _mapping(member_config(m)) for m in p.members} for k, p in typed_papers.items()}

    def m(self, paper: str, name: str):
        return self.cfg[paper][name]

    def members(self, paper: str, command: str) -> dict:
        return {m["name"]: self.cfg[paper][m["name"]] for m in self.paper[paper]["members"] if m["command"] == command}

    def gaps(self, paper: str) -> str:
        return " ".join(g["what"] for g in self.paper[paper]["not_runnable"])


def _mapping(cfg):
    """A member's typed config as plain mappings (a truncation member: ``[(depth, config), ...]``)."""
    if isinstance(cfg, list):
        return [(k, c.to_dict()) for k, c in cfg]
    return cfg.to_dict()


@pytest.fixture(scope="module")
def papers():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Papers()


@dataclass(frozen=True)
class T:
    """A value transcribed from the paper: ``quote`` (verbatim) at ``where`` gives ``expected``; ``get`` reads it
    from the configs; ``covers`` are the ``file:key`` patterns (under configs/paper/) it accounts for."""

    paper: str
    where: str
    quote: str
    expected: Any
    get: Callable[[Papers], Any]
    covers: tuple[str, ...] = ()


@dataclass(frozen=True)
class N:
    """A value the seed text does not give: what is used and why (asserted like a transcription)."""

    paper: str
    why: str
    expected: Any
    get: Callable[[Papers], Any]
    covers: tuple[str, ...] = ()


def _all(d: dict, fn) -> set:
    return {json.dumps(fn(c), sort_keys=True, default=str) for c in d.values()}


def _one(d: dict, fn):
    vals = _all(d, fn)
    assert len(vals) == 1, f"members differ: {vals}"
    return json.loads(vals.pop())


def _runs(cfg: dict) -> set:
    return {(r["model"], r["regime"], h) for r in cfg["runs"] for h in r["heads"]}


def _task(cfg) -> str:
    from eegfm_bench.data.tasks import task_name

    return task_name(cfg["task"])


def _n_classes(cfg) -> int:
    from eegfm_bench.data.tasks import get_task

    return len(get_task(cfg["task"]).class_names)


def _conds(cfg: dict, head: str) -> list[float]:
    return sorted({float(re.search(r"(-?[\d.]+)", c.split("=", 1)[1]).group(1)) for c in cfg["conditions"]
                   if c.startswith(head)}, reverse=True)


def _cv(P: Papers, name: str) -> dict:
    return P.m("003", f"{name}_cv")


def _sweeps(P: Papers, sleep: bool) -> dict:
    return {k: v for k, v in P.members("003", "sweep").items() if k.startswith("sleep") == sleep}


def _models(P: Papers, paper: str) -> set:
    out = set()
    for cmd in ("cv", "controls"):
        for c in P.members(paper, cmd).values():
            out |= {r["model"] for r in c.get("runs", [])} | {m["model"] for m in c.get("models", [])}
    return out


FM_003 = {"biot", "cbramod", "labram", "reve"}
DATASETS_003 = [  # cv member, quote, task, classes
    ("movement_hg", "a 4-class executed movement dataset (Schirrmeister et al., 2017) (Movement-HG)", "hgd", 4),
    ("mi_ku", "covering 2-class motor imagery (Motor-Imagery-KU) and visual P300 event-related potentials (ERP)",
     "ku_mi", 2),
    ("erp", "covering 2-class motor imagery (Motor-Imagery-KU) and visual P300 event-related potentials (ERP)",
     "ku_erp", 2),
    ("mi_pn", "covering 4-class motor imagery (Motor-Imagery-PN), 4-class motor execution (Movement-PN), and eyes open "
     "versus closed (Eyes)", "eegmmidb_mi_4class", 4),
    ("movement_pn", "covering 4-class motor imagery (Motor-Imagery-PN), 4-class motor execution (Movement-PN), and "
     "eyes open versus closed (Eyes)", "eegmmidb_movement_4class", 4),
    ("eyes", "covering 4-class motor imagery (Motor-Imagery-PN), 4-class motor execution (Movement-PN), and eyes open "
     "versus closed (Eyes)", "eegmmidb_eyes", 2),
    ("memory", "a digit span working memory task (Pavlov et al., 2022) (Memory)", "digit_span", 3),
    ("sleep_edf", "a 6-class sleep staging dataset (Kemp et al., 2000) (Sleep-EDF)", "sleep_edf_6stage", 6),
    ("sleep_hmc", "a 5-class clinical sleep staging dataset (Alvarez-Estevez and Rijsman, 2022) (Sleep-HMC)",
     "sleep_hmc", 5),
    ("seizure", "a seizure detection task (Detti, 2020) (Seizure)", "siena", 2),
]
TABLE6 = [  # Table 6 row (verbatim), paper task type, primary, control (regions.yaml names)
    ("| Movement | Central L/M/R, Centroparietal L/R | Posterior Middle, Anterior |", "movement",
     ["central_left", "central_middle", "central_right", "centroparietal_left", "centroparietal_right"],
     ["posterior_middle", "anterior"]),
    ("| Motor imagery | Central L/M/R, Centroparietal L/R | Posterior Middle, Anterior |", "motor_imagery",
     ["central_left", "central_middle", "central_right", "centroparietal_left", "centroparietal_right"],
     ["posterior_middle", "anterior"]),
    ("| Visual P300 | Posterior Middle | Anterior, Posterior L/R |", "visual_p300", ["posterior_middle"],
     ["anterior", "posterior_left", "posterior_right"]),
    ("| Working memory | Frontal L/M/R | Posterior Middle, Central L/R |", "working_memory",
     ["frontal_left", "frontal_middle", "frontal_right"], ["posterior_middle", "central_left", "central_right"]),
    ("| Eyes open/closed | Anterior, Posterior L/M/R | Frontal L/M/R, Central L/M/R |", "eyes_open_closed",
     ["anterior", "posterior_left", "posterior_middle", "posterior_right"],
     ["frontal_left", "frontal_middle", "frontal_right", "central_left", "central_middle", "central_right"]),
    ("| Seizure detection | Anterior, Frontal L/M/R, Central L/R | Parietal L/M/R, Posterior Middle |",
     "seizure_detection", ["anterior", "frontal_left", "frontal_middle", "frontal_right", "central_left",
                           "central_right"],
     ["parietal_left", "parietal_middle", "parietal_right", "posterior_middle"]),
]
TASK_TYPE = {"movement_hg": "movement", "movement_pn": "movement", "mi_ku": "motor_imagery", "mi_pn": "motor_imagery",
             "erp": "visual_p300", "eyes": "eyes_open_closed", "memory": "working_memory",
             "sleep_edf": "sleep_staging_edf", "sleep_hmc": "sleep_staging_hmc", "seizure": "seizure_detection"}
TABLE5_CHANNELS = [("Movement-HG (78 ch)", "hgd", 78), ("Motor-Imagery-KU (62 ch)", "ku_mi", 62),
                   ("ERP (62 ch)", "ku_erp", 62), ("Movement-PN Motor-Imagery-PN Eyes (64 ch)", "eegmmidb_eyes", 64),
                   ("Movement-PN Motor-Imagery-PN Eyes (64 ch)", "eegmmidb_mi_4class", 64),
                   ("Movement-PN Motor-Imagery-PN Eyes (64 ch)", "eegmmidb_movement_4class", 64),
                   ("Memory (63 ch)", "digit_span", 63), ("Seizure (19 ch)", "siena", 19),
                   ("Sleep-EDF provides only two bipolar derivations [Kemp et al., 2000], and Sleep-HMC only four",
                    "sleep_edf_6stage", 2),
                   ("Sleep-EDF provides only two bipolar derivations [Kemp et al., 2000], and Sleep-HMC only four",
                    "sleep_hmc", 4)]
PROBE_TASKS = {"hgd", "ku_mi", "ku_erp", "eegmmidb_eyes"}


def _regions(P: Papers, kind: str) -> dict:
    from eegfm_bench.perturb.regions import _tables

    return _tables()[1][kind]


TRANSCRIPTIONS: list[T] = [
    # ------------------------------------------------------------------------------------------ paper 003: cv
    T("003", "App. I.5", "Probes are trained on the same ten folds as the model checkpoints", ["kfold", 10],
      lambda P: _one({**P.members("003", "cv"), **{f"{k}_{d}": c for k, v in P.members("003", "truncation").items()
                                                 for d, c in v}}, lambda c: [c["split"]["scheme"], c["split"]["k"]]),
      ("003/cv.yaml:split.scheme", "003/cv.yaml:split.k", "003/truncation_*.yaml:split")),
    T("003", "§3 Models", "We evaluated every foundation model under two regimes: head-only probing on a frozen "
      "backbone and full fine-tuning of all parameters", sorted([m, r] for m in FM_003 for r in ("full", "head_only")),
      lambda P: sorted({(r["model"], r["regime"]) for r in _cv(P, "eyes")["runs"] if r["model"] != "eegnet"}),
      ("003/runs_main.yaml:runs",)),
    T("003", "§3 Models", "served as the supervised baseline trained from scratch on each task",
      [["eegnet", "full", None]], lambda P: _one({k: v for k, v in P.members("003", "cv").items()
                                                 if not k.endswith("pooling")}, lambda c: [
          [r["model"], r["regime"], r.get("pretrained")] for r in c["runs"] if r["model"] == "eegnet"])),
    T("003", "§3 Models", "The six foundation models were initialised from publicly available pre-trained checkpoints",
      True, lambda P: all(r.get("pretrained") for c in P.members("003", "cv").values() for r in c["runs"]
                          if r["model"] != "eegnet")),
    T("003", "§1", "REVE (El Ouahidi et al., 2025), BrainOmni (Xiao et al., 2025), NeuroRVQ (Barmpas et al., 2026), "
      "LaBraM (Jiang et al., 2024), CBraMod (Wang et al., 2025) and BIOT (Yang et al., 2023), and EEGNet",
      [True, True, True], lambda P: [_models(P, "003") == FM_003 | {"eegnet"}, "NeuroRVQ" in P.gaps("003"),
                                     "BrainOmni" in P.gaps("003")]),
    *[T("003", "§3 Datasets and Tasks", quote, [task, classes], lambda P, n=name: [_task(_cv(P, n)), _n_classes(
        _cv(P, n))], (f"003/tasks/{name}.yaml:task*", f"003/tasks/{name}.yaml:experiment"))
      for name, quote, task, classes in DATASETS_003],
    T("003", "§3 Datasets and Tasks", "All recordings are common-average referenced and bandpass filtered following "
      "each model’s preprocessing", [["average"], ["average"]],
      lambda P: [sorted({_reference(c, r["model"]) for n, c in P.members("003", "cv").items()
                         if not n.startswith("sleep") for r in c["runs"]})] * 2),
    # ------------------------------------------------------------------------------------ paper 003: pooling
    T("003", "§4.5", "we compare mean pooling, attention pooling, token flattening and a mean-tile control for "
      "LaBraM, NeuroRVQ, REVE, BrainOmni and CBraMod", sorted([m, r, h] for m in ("cbramod", "labram", "reve")
                                                            for r in ("full", "head_only")
                                                            for h in ("attention", "flatten", "mean", "mean_tile")),
      lambda P: sorted({x for x in _runs(_cv(P, "eyes")) | _runs(P.m("003", "eyes_pooling"))
                        if x[0] in ("cbramod", "labram", "reve")}), ("003/runs_pooling.yaml:runs",)),
    T("003", "§4.5", "We use linear classifiers for this ablation and evaluate both head-only adaptation and full "
      "fine-tuning on four tasks (Appendix J)", [4, True, ["attention", "flatten", "mean_tile"]],
      lambda P: [len(P.members("003", "cv")) - 10,
                 all(r.get("head_kwargs") is None and "mlp" not in r["heads"] for c in P.members("003", "cv").values()
                     for r in c["runs"]),
                 sorted({h for c in P.members("003", "cv").values() if c["experiment"].endswith("_pooling")
                         for r in c["runs"] for h in r["heads"]})]),
    # -------------------------------------------------------------------------------------- paper 003: sweep
    T("003", "App. D.1", "SNR levels tested: $10$, $5$, $0$, $-3$, $-5$, $-15$ (white noise only) dB",
      [[10.0, 5.0, 0.0, -3.0, -5.0, -15.0], [10.0, 5.0, 0.0, -3.0, -5.0]],
      lambda P: _one(P.members("003", "sweep"), lambda c: [_conds(c, "white_snr"), _conds(c, "pink_snr")]),
      ("003/sweep.yaml:conditions", "003/sweep_sleep.yaml:conditions")),
    T("003", "App. D.2", r"probability $p\in\{0.10,0.30,0.50\}$", [0.5, 0.3, 0.1],
      lambda P: _one(_sweeps(P, False), lambda c: _conds(c, "dropout_p"))),
    T("003", "App. D.2", "we also test true channel dropout, where dropped channels are removed from the input rather "
      "than zero-padded", ["removed", "zero"], lambda P: _one(_sweeps(P, False), lambda c: sorted(
          {x.rsplit("_", 1)[1] for x in c["conditions"] if x.startswith("dropout_p")}))),
    T("003", "App. D.2", "We omit Sleep-EDF and Sleep-HMC from all random dropout figures and tables", [],
      lambda P: _one(_sweeps(P, True), lambda c: _conds(c, "dropout_p"))),
    T("003", "App. D.3", "Dropping a region zeroes out all channels in that set for all models",
      ["region=control_zero", "region=primary_zero"], lambda P: _one(P.members("003", "sweep"), lambda c: sorted(
          x for x in c["conditions"] if x.startswith("region=") and x.endswith("_zero")))),
    T("003", "App. D.3", "we also test true removal of the dropped region",
      ["region=control_removed", "region=primary_removed"], lambda P: _one(P.members("003", "sweep"), lambda c: sorted(
          x for x in c["conditions"] if x.startswith("region=") and x.endswith("_removed")))),
    T("003", "App. D.5", "SNR levels tested: $5$ dB and $-3$ dB, for each of primary and control regions",
      ["region_noise=control_snr=-3dB", "region_noise=control_snr=5dB", "region_noise=primary_snr=-3dB",
       "region_noise=primary_snr=5dB"],
      lambda P: _one(P.members("003", "sweep"), lambda c: sorted(x for x in c["conditions"]
                                                                  if x.startswith("region_noise")))),
    T("003", "§4.1", "BIOT fails to learn on almost every task and is excluded from subsequent analyses",
      ["cbramod", "eegnet", "labram", "reve"], lambda P: _one({k: v for k, v in P.members("003", "sweep").items()
                                                           if k != "sleep_edf_sweep"}, lambda c: sorted(c["models"])),
      ("003/sweep.yaml:models",)),
    T("003", "Table 5", "One mask is drawn per dataset and probability and shared across trials and folds", "paper",
      lambda P: _one(P.members("003", "sweep"), lambda c: c["mask"]), ("003/sweep.yaml:mask",)),
    T("003", "Tables 10-17", "marks a model significantly better than EEGNet", "eegnet",
      lambda P: _one(P.members("003", "sweep"), lambda c: c["reference"]), ("003/sweep.yaml:reference",)),
    T("003", "App. D.3", "Table 6 lists the region assignments per task.", sorted(TASK_TYPE.items()),
      lambda P: sorted((n, _paper_task(_cv(P, n))) for n in TASK_TYPE)),
    *[T("003", "Table 6", row, [primary, control], lambda P, k=kind: [_regions(P, k)["primary"],
                                                                     _regions(P, k)["control"]])
      for row, kind, primary, control in TABLE6],
    *[T("003", "Table 5 / App. D.3", quote, n, lambda P, t=task: P.paper["003"]["datasets"][t]["n_chans"],
        (f"003_beyond_accuracy.yaml:datasets.{task}.n_chans",)) for quote, task, n in TABLE5_CHANNELS],
    # -------------------------------------------------------------------------------------- paper 003: probes
    T("003", "§4.4", "For computational reasons, we focus on REVE and NeuroRVQ as the two highest-performing models",
      [["reve"], ["full"], True], lambda P: _one(P.members("003", "probe"), lambda c: [
          c["select"]["models"], c["select"]["regimes"], "NeuroRVQ" in P.gaps("003")]), ("003/probe.yaml:select",)),
    T("003", "App. I.5.1", "at indices $17$, $13$, $8$ and $20$ on Movement-HG, Motor-Imagery-KU, ERP and Eyes",
      sorted(PROBE_TASKS), lambda P: sorted(_task(_cv(P, n.rsplit("_", 1)[0])) for n in P.members("003", "probe"))),
    T("003", "App. I.5", "We use two pooling strategies: (i) mean pooling", ["mean", "flatten"],
      lambda P: _one(P.members("003", "probe"), lambda c: c["probe"]["poolings"]), ("003/probe.yaml:probe.poolings",)),
    T("003", "App. I.5", "Probes are trained for up to 20 epochs with Adam, cosine annealing, and early stopping "
      "(patience 5 epochs)", [20, 5], lambda P: _one(P.members("003", "probe"), lambda c: [
          c["probe"]["max_epochs"], c["probe"]["patience"]]),
      ("003/probe.yaml:probe.max_epochs", "003/probe.yaml:probe.patience")),
    T("003", "§4.4", "extracted after each fine-tuned and pre-trained transformer block", True,
      lambda P: _one(P.members("003", "probe"), lambda c: c["probe"]["include_frozen"]),
      ("003/probe.yaml:probe.include_frozen",)),
    T("003", "App. I.4", "We extract raw softmax attention weights from each transformer block for REVE and NeuroRVQ",
      [True, ["reve"]], lambda P: _one(P.members("003", "probe"), lambda c: [c["attention"]["enabled"],
                                                                             c["attention"]["models"]]),
      ("003/probe.yaml:attention",)),
    # ---------------------------------------------------------------------------------- paper 003: attribution
    T("003", "App. I.1", "prediction confidence exceeds the 75th percentile", 75.0,
      lambda P: _one(P.members("003", "attribute"), lambda c: c["attribution"]["percentile"]),
      ("003/attribute*.yaml:attribution.percentile",)),
    T("003", "§3 Interpretability", "we adopted AttnLRP as our primary attribution method", ["attnlrp", "attnlrp"],
      lambda P: _one(P.members("003", "attribute"), lambda c: [c["attribution"]["methods"][0],
                                                               c["attribution"]["attention_rule"]]),
      ("003/attribute*.yaml:attribution.methods", "003/attribute.yaml:attribution.attention_rule")),
    T("003", "App. I.1", "we also compute it for the models where AttnLRP is numerically stable (LaBraM, REVE, CBraMod, "
      "EEGNet)", ["attnlrp", "gradcam", "gxi"], lambda P: sorted(P.m("003", "eyes_attribute")["attribution"]["methods"])),
    T("003", "App. I.3", "as a supplementary attribution method", True,
      lambda P: "gradcam" in P.m("003", "eyes_attribute")["attribution"]["methods"]),
    T("003", "Figure 3", "Columns (Models): EEGNet, CBraMod, LaBraM, NeuroRVQ, REVE and BrainOmni. Rows (Benchmarks): "
      "Movement-HG, Motor-Imagery-KU, ERP, Eyes and Seizure.",
      [["cbramod", "eegnet", "labram", "reve"], sorted(PROBE_TASKS | {"siena"}), ["full"]],
      lambda P: [sorted(P.m("003", "eyes_attribute")["select"]["models"]),
                 sorted(_task(_cv(P, n[:-len("_attribute")])) for n in P.members("003", "attribute")
                        if n.endswith("_attribute")), P.m("003", "eyes_attribute")["select"]["regimes"]],
      ("003/attribute.yaml:select",)),
    T("003", "App. I.2", "white noise at $0$ dB and $-5$ dB, primary-region noise at $5$ dB, and primary-region "
      "substitution", ["clean", "white_snr=0dB", "white_snr=-5dB", "region_noise=primary_snr=5dB", "region_sub=primary"],
      lambda P: _one({k: v for k, v in P.members("003", "attribute").items() if k.endswith("perturbed")},
                     lambda c: c["attribution"]["conditions"]), ("003/attribute*.yaml:attribution.conditions",)),
    T("003", "App. I.2", "We compare REVE and NeuroRVQ, the two highest-performing models in full fine-tuning (Section "
      "4.1), on Movement-HG, Motor-Imagery-KU, ERP and Eyes", [["reve"], ["full"], sorted(PROBE_TASKS)],
      lambda P: [P.m("003", "eyes_attribute_perturbed")["select"]["models"],
                 P.m("003", "eyes_attribute_perturbed")["select"]["regimes"],
                 sorted(_task(_cv(P, n[:-len("_attribute_perturbed")])) for n in P.members("003", "attribute")
                        if n.endswith("perturbed"))], ("003/attribute_perturbed.yaml:select",)),
    T("003", "App. I.6", "We attach a flatten-pooling classification head (see Appendix J) after each of several "
      "intermediate blocks and fine-tune the resulting truncated stack", [["reve_truncated", "full", "flatten"]],
      lambda P: _one(P.members("003", "truncation"), lambda v: sorted(_runs(v[0][1]))),
      ("003/truncation_*.yaml:runs",)),
    T("003", "App. I.6", "REVE by block 14", True, lambda P: all(14 in [k for k, _ in v]
                                                                for v in P.members("003", "truncation").values())),
    # ------------------------------------------------------------------------------------------- paper 001
    T("001", "§3.1", "We evaluate LaBraM [4], EEGMamba [5], CBraMod [6], REVE [7], and BIOT [11]",
      [["biot_bipolar", "cbramod", "labram", "reve"], True],
      lambda P: [sorted(_models(P, "001")), "EEGMamba" in P.gaps("001")]),
    T("001", "§3.5", "The primary probe is L2-regularized logistic regression (class_weight=balanced, solver=lbfgs, "
      "max_iter=1000)", "logreg", lambda P: P.m("001", "chbmit")["probe"]["kind"], ("001/controls.yaml:probe.kind",)),
    T("001", "§3.5", "$C=1.0$ for CHB-MIT and Sleep-EDF and $C=0.1$ for TUAB, the notch-filtered ds004504 tasks, and "
      "CAUEEG", {"ad_vs_ftd": 0.1, "ad_vs_hc": 0.1, "caueeg": 0.1, "caueeg_reve": 0.1, "chbmit": 1.0,
                 "sleep_edf": 1.0, "tuab": 0.1},
      lambda P: {k: c["probe"]["C"] for k, c in P.members("001", "controls").items() if c["probe"]["kind"] == "logreg"},
      ("001/*.yaml:probe.C",)),
    T("001", "§3.5 CHB-MIT", "The primary analysis uses epoch-level patient LOSO", "loso",
      lambda P: P.m("001", "chbmit")["split"]["scheme"], ("001/chbmit.yaml:split",)),
    T("001", "§3.5 CHB-MIT", "every encoder representation is reduced by in-fold PCA-200 before probing", 200,
      lambda P: P.m("001", "chbmit")["probe"]["overrides"]["frozen"]["pca"], ("001/chbmit.yaml:probe.overrides",)),
    T("001", "§3.5 CHB-MIT", "REVE tokens are mean-pooled to 512 dimensions", "mean",
      lambda P: _model(P.m("001", "chbmit"), "reve")["pooling"]),
    T("001", "§4.2.2", "matched fully randomly initialized REVE encoders with seeds 42, 43, and 44", [42, 43, 44],
      lambda P: _model(P.m("001", "chbmit"), "reve")["init_seeds"]),
    T("001", "§4.2.3", "Across 100 within-subject permutations", [100, "within_subject"],
      lambda P: [P.m("001", "chbmit")["permutation"]["n"], P.m("001", "chbmit")["permutation"]["scheme"]],
      ("001/controls.yaml:permutation.n", "001/chbmit.yaml:permutation")),
    T("001", "§3.6", "by permuting one diagnosis per participant, broadcasting it to that participant’s epochs",
      ["subject_label", "subject_label"], lambda P: [P.m("001", t)["permutation"]["scheme"]
                                                     for t in ("ad_vs_hc", "ad_vs_ftd")],
      ("001/ad_vs_*.yaml:permutation",)),
    T("001", "§4.2.2", "Three fully random REVE encoders yield a grand mean of", 3,
      lambda P: len(_model(P.m("001", "ad_vs_ftd"), "reve")["init_seeds"])),
    T("001", "§4.2.2", "the AD-versus-HC pretrained and single-seed fully-random means", [1, 1],
      lambda P: [len(_model(P.m("001", t), "biot_bipolar")["init_seeds"]) for t in ("ad_vs_hc", "ad_vs_ftd")]),
    T("001", "§3.1 BIOT", "We use its six-dataset EEG checkpoint", ["braindecode/biot-pretrained-six-datasets-18chs"],
      lambda P: sorted({m["pretrained"] for c in P.members("001", "controls").values() for m in c["models"]
                        if m["model"] == "biot_bipolar"})),
    T("001", "§3.1", "BIOT is unavailable on TUAB because the retained input lacks the names required to construct its "
      "bipolar derivations, and on two-channel Sleep-EDF because the bipolar16 contract cannot be satisfied",
      [False, False], lambda P: [any(m["model"].startswith("biot") for m in P.m("001", t)["models"])
                                 for t in ("tuab", "sleep_edf")]),
    T("001", "§3.5 TUAB", "The analysis uses epoch-level, subject-grouped five-fold validation and token-flattened "
      "REVE embeddings", [["kfold", 5], "flatten"], lambda P: [[P.m("001", "tuab")["split"]["scheme"],
                                                               P.m("001", "tuab")["split"]["k"]],
                                                              _model(P.m("001", "tuab"), "reve")["pooling"]],
      ("001/tuab.yaml:split",)),
    T("001", "§3.6", "TUAB is not included because a protocol-matched current-family result could not be "
      "reconstructed from the retained data", [["simple"], ["simple", "enhanced"]],
      lambda P: [P.m("001", "tuab")["features"]["families"], P.m("001", "chbmit")["features"]["families"]],
      ("001/tuab.yaml:features", "001/controls.yaml:features.families")),
    T("001", "§3.5 ds004504", "Both AD-versus-HC and AD-versus-FTD use epoch-level, subject-grouped five-fold validation",
      [["kfold", 5, "subject"]] * 2, lambda P: [[P.m("001", t)["split"][k] for k in ("scheme", "k", "group_by")]
                                             for t in ("ad_vs_hc", "ad_vs_ftd")], ("001/ad_vs_*.yaml:split",)),
    T("001", "§3.1 REVE", r"the primary ds004504 analyses use the historical flattened $19\times 4\times 512=38,912$-"
      "dimensional output", ["flatten", "flatten"],
      lambda P: [_model(P.m("001", t), "reve")["pooling"] for t in ("ad_vs_hc", "ad_vs_ftd")]),
    T("001", "§3.5 Sleep-EDF", "Wake-versus-sleep uses epoch-level subject LOSO", "loso",
      lambda P: P.m("001", "sleep_edf")["split"]["scheme"], ("001/sleep_edf.yaml:split",)),
    T("001", "§3.4", r"For Sleep-EDF, the task-specific baseline uses the $9\times N_{\text{ch}}=18$ spectral, Hjorth, "
      "and entropy features without the two study-defined summaries", [False, True],
      lambda P: [P.m("001", "sleep_edf")["features"]["study_summaries"],
                 P.m("001", "chbmit")["features"]["study_summaries"]], ("001/sleep_edf.yaml:features",)),
    T("001", "§5.4", "REVE was evaluated on Sleep-EDF using compound channel names (Fpz-Cz, Pz-Oz) resolved to single "
      "electrodes (Fpz, Pz)", {"EEG Fpz-Cz": "Fpz", "EEG Pz-Oz": "Pz"},
      lambda P: P.m("001", "sleep_edf")["task"]["channels"]["rename"], ("001/sleep_edf.yaml:task",)),
    T("001", "§3.5 CAUEEG", "The primary analysis uses recording-level stratified five-fold validation",
      ["kfold", 5, "recording"], lambda P: _one({k: v for k, v in P.members("001", "controls").items()
                                                 if k.startswith("caueeg")},
                                                lambda c: [c["split"][k] for k in ("scheme", "k", "group_by")]),
      ("001/caueeg*.yaml:split",)),
    T("001", "§3.3", "REVE alone was additionally reduced by in-fold PCA-50", [[50], [None]],
      lambda P: [sorted({(c["probe"]["overrides"].get("frozen") or {}).get("pca") for c in _with(P, "reve")}),
                 sorted({(c["probe"]["overrides"].get("frozen") or {}).get("pca") for k, c in
                         P.members("001", "controls").items() if k.startswith("caueeg") and c not in _with(P, "reve")},
                        key=str)], ("001/caueeg*.yaml:probe.overrides",)),
    T("001", "§3.5", "CAUEEG sensitivities use fold-local StandardScaler followed by LDA (solver=lsqr, automatic "
      "shrinkage) or SVM-RBF ($C=10$", [["lda", None], ["svm_rbf", 10.0]] * 2,
      lambda P: [[P.m("001", t)["probe"]["kind"], P.m("001", t)["probe"]["C"]]
                 for t in ("caueeg_lda", "caueeg_svm", "caueeg_reve_lda", "caueeg_reve_svm")],
      ("001/caueeg*.yaml:probe.kind", "001/caueeg*.yaml:probe.svm_probability")),
    T("001", "§4.2.2", "StandardScaler–PCA-50–SVM-RBF probe", ["svm_rbf", 50, [42, 43, 44]],
      lambda P: [P.m("001", "caueeg_reve_svm")["probe"]["kind"],
                 P.m("001", "caueeg_reve_svm")["probe"]["overrides"]["frozen"]["pca"],
                 _model(P.m("001", "caueeg_reve_svm"), "reve")["init_seeds"]]),
    T("001", "Table 7", "mean five-fold AUROC for predicting which dataset produced a recording", 5,
      lambda P: _one(_identity(P), lambda c: c["identity"]["n_folds"]), ("001/caueeg*.yaml:identity.n_folds",)),
    T("001", "§4.4", "All five encoders separate ds004504 from CAUEEG at AUROC $1.000$ in full space and after in-fold "
      "PCA-50", [50, ["ds004504_all", "caueeg_3class"], ["biot_bipolar", "cbramod", "labram", "reve"]],
      lambda P: [_one(_identity(P), lambda c: c["identity"]["pca_k"]),
                 _one(_identity(P), lambda c: [_task({"task": t}) for t in c["identity"]["tasks"]]),
                 sorted(m["model"] for c in _identity(P).values() for m in c["models"])],
      ("001/caueeg*.yaml:identity.pca_k", "001/caueeg*.yaml:identity.tasks")),
    T("001", "§3.2", "the three-way AD/FTD/HC control uses all $n=88$ participants", ["AD", "FTD", "HC"],
      lambda P: sorted(_one(_identity(P), lambda c: _classes(c["identity"]["tasks"][0])))),
    T("001", "§4.4", "Across 20 label permutations", 20,
      lambda P: _one(_identity(P), lambda c: c["identity"]["n_permutations"]),
      ("001/caueeg*.yaml:identity.n_permutations",)),
    T("001", "§4.4", "ten balanced $88$-versus-$88$ draws remain at $1.000$", 10,
      lambda P: _one(_identity(P), lambda c: c["identity"]["n_balanced"]), ("001/caueeg*.yaml:identity.n_balanced",)),
    T("001", "§3.6", "This REVE-only control was evaluated on binary and three-way CAUEEG", [["reve", "lora"]],
      lambda P: [[s["model"], s["regime"]] for c in P.members("001", "controls").values() for s in c["scrambled"]],
      ("001/caueeg_reve_svm.yaml:scrambled",)),
    T("001", "§4.2.4", "whereas the scrambled-label runs used up to 10 epochs with patience 3", 10,
      lambda P: P.m("001", "caueeg_reve_svm")["scrambled"][0]["trainer"]["max_epochs"]),
    T("001", "§4.2.4", "the five-run scrambled-label mean", 5,
      lambda P: len(P.m("001", "caueeg_reve_svm")["scrambled"][0]["seeds"])),
    T("001", "§3.5 Metrics", "Balanced accuracy (BA) and AUROC are reported as mean", "auroc",
      lambda P: _one(P.members("001", "controls"), lambda c: c["metric"]), ("001/controls.yaml:metric",)),
    T("001", "§4.6", "95% CI", 0.95, lambda P: _one(P.members("001", "controls"), lambda c: c["bootstrap"]["level"]),
      ("001/controls.yaml:bootstrap.level",)),
    T("001", "§4.2.3", "at the conventional 0.05 level", 0.05,
      lambda P: _one(P.members("001", "controls"), lambda c: c["gates"]["alpha"]), ("001/controls.yaml:gates",)),
    T("001", "§3.3", "All primary pipelines used MNE-Python [32], 200 Hz signals, and 4.0 s non-overlapping epochs",
      [200.0, 4.0], lambda P: _one(P.members("001", "controls"), lambda c: [
          c["features"]["preprocessing"]["sfreq"], c["features"]["preprocessing"]["window_s"]]),
      ("001/controls.yaml:features.preprocessing",)),
    T("001", "§3.4", r"The feature family has $9\times N_{\text{ch}}+2$ features per epoch", 173,
      lambda P: _n_features("simple", 19)),
    T("001", "§3.4", r"The full family has $15\times N_{\text{ch}}+6$ features per epoch", 291,
      lambda P: _n_features("enhanced", 19)),
    T("001", "§3.2 CHB-MIT", "The retained cohort contains 2,428 ictal and 7,284 interictal epochs", 2428 + 7284,
      lambda P: P.paper["001"]["datasets"]["chbmit"]["windows"], ("001_negative_controls.yaml:datasets.chbmit.*",)),
    T("001", "§3.2 CHB-MIT", "Continuous scalp EEG from the full cohort of 23 unique pediatric epilepsy patients", 23,
      lambda P: P.paper["001"]["datasets"]["chbmit"]["subjects"]),
    T("001", "§3.2 TUAB", "Our retained evaluation cohort contains 253 subjects", 253,
      lambda P: P.paper["001"]["datasets"]["tuab"]["subjects"], ("001_negative_controls.yaml:datasets.tuab.*",)),
    T("001", "§3.1", "the classical, LaBraM, EEGMamba, and CBraMod rows used a 4,807-epoch subject-capped sample", 4807,
      lambda P: P.paper["001"]["datasets"]["tuab"]["windows"]),
    T("001", "§3.2 ds004504", "The binary AD-vs-HC task uses $n=65$ and 13,170 epochs; the AD-vs-FTD task uses $n=59$ "
      "and 11,267 epochs", [[65, 13170], [59, 11267]],
      lambda P: [[P.paper["001"]["datasets"][t]["subjects"], P.paper["001"]["datasets"][t]["windows"]]
                 for t in ("ds004504_ad_vs_hc", "ds004504_ad_vs_ftd")],
      ("001_negative_controls.yaml:datasets.ds004504_*",)),
    T("001", "§3.2 Sleep-EDF", "yielding 2,996 epochs", 2996,
      lambda P: P.paper["001"]["datasets"]["sleep_edf_wake_sleep"]["windows"],
      ("001_negative_controls.yaml:datasets.sleep_edf_wake_sleep.*",)),
    T("001", "§3.2 Sleep-EDF", "The analysis uses a fixed 14-subject cohort", 14,
      lambda P: P.paper["001"]["datasets"]["sleep_edf_wake_sleep"]["subjects"]),
    T("001", "§3.2 CAUEEG", "comprising 1,379 recordings from 1,155 patients. The three-way task retains 1,187 "
      "recordings", [1187, None], lambda P: [P.paper["001"]["datasets"]["caueeg_3class"][k]
                                             for k in ("subjects", "windows")],
      ("001_negative_controls.yaml:datasets.caueeg_3class.*",)),
    T("001", "§3.5", "no single subject-level outcome was defined", ["none", "none"],
      lambda P: [P.m("001", t)["aggregate"] for t in ("chbmit", "sleep_edf")],
      ("001/chbmit.yaml:aggregate", "001/sleep_edf.yaml:aggregate")),
    T("001", "§3.5", "Subject-aggregated estimates are reported separately for the two ds004504 contrasts",
      ["subject", "subject"], lambda P: [P.m("001", t)["aggregate"] for t in ("ad_vs_hc", "ad_vs_ftd")],
      ("001/ad_vs_*.yaml:aggregate",)),
    T("001", "§5.4", "Subject aggregation was retained only for the two ds004504 contrasts and cannot be reconstructed "
      "for TUAB from the retained data", "none", lambda P: P.m("001", "tuab")["aggregate"],
      ("001/tuab.yaml:aggregate",)),
    T("001", "§3.5", "CAUEEG diagnosis is evaluated per recording", "recording",
      lambda P: _one({k: v for k, v in P.members("001", "controls").items() if k.startswith("caueeg")},
                     lambda c: c["aggregate"]), ("001/caueeg*.yaml:aggregate",)),
    T("001", "§4.2.2", "A Gaussian random projection of the normalized raw epoch signal reaches", True,
      lambda P: "Gaussian random projection" in P.gaps("001")),
    T("001", "§3.5", "whereas the CHB-MIT GradientBoosting and MLP sensitivities are unweighted", True,
      lambda P: "GradientBoosting and MLP" in P.gaps("001")),
    # ------------------------------------------------------------------------------------------- paper 000
    T("000", "App. B", "B Worked example: one NMT record through the four axes", "nmt",
      lambda P: P.m("000", "nmt_audit")["task"], ("000/nmt_audit.yaml:task", "000/nmt_audit.yaml:experiment")),
    T("000", "App. B", "The prevalence baseline is log2 3 = 1.585 bits per view.", 3,
      lambda P: len(P.m("000", "nmt_audit")["data"]["views"])),
    T("000", "App. A.3", "For NMT, the predeclared rank is K − 1", 2,
      lambda P: P.m("000", "nmt_audit")["audit"]["rank"], ("000/nmt_audit.yaml:audit.rank",)),
    T("000", "App. B", "while the ten matched random subspaces leave it between 0.221 and 0.231", 10,
      lambda P: P.m("000", "nmt_audit")["audit"]["n_random"], ("000/nmt_audit.yaml:audit.n_random",)),
    T("000", "App. F", "Random rows average ten rank-two, energy-matched Haar subspaces per encoder.", "energy",
      lambda P: P.m("000", "nmt_audit")["audit"]["random_match"], ("000/nmt_audit.yaml:audit.random_match",)),
    T("000", "App. B", "within the −0.02 margin", -0.02, lambda P: P.m("000", "nmt_audit")["audit"]["utility_margin"],
      ("000/nmt_audit.yaml:audit.utility_margin",)),
    T("000", "App. A.4", "the lower 95% confidence bound for utility change to remain within the declared margin", 0.95,
      lambda P: P.m("000", "nmt_audit")["audit"]["level"], ("000/nmt_audit.yaml:audit.level",)),
    T("000", "App. E", "The audit uses five-seed EEGNetSmall encoders with 128-dimensional embeddings and fixed heads",
      ["eegnet", 5, 128, "mean"], lambda P: [P.m("000", "nmt_audit")["encoder"]["backbone"],
                                             len(P.m("000", "nmt_audit")["encoder"]["seeds"]),
                                             P.m("000", "nmt_audit")["encoder"]["backbone_kwargs"]["F2"],
                                             P.m("000", "nmt_audit")["encoder"]["head"]],
      ("000/nmt_audit.yaml:encoder.backbone", "000/nmt_audit.yaml:encoder.seeds", "000/nmt_audit.yaml:encoder.head",
       "000/nmt_audit.yaml:encoder.backbone_kwargs")),
    T("000", "App. F", "three shortcut-reference rotations on the same 185 records", 185,
      lambda P: P.m("000", "nmt_audit")["split"]["n_test"], ("000/nmt_audit.yaml:split.n_test",)),
    T("000", "App. E", "Reconstruction in-domain AUROC changes from 0.7774 to 0.7788", True,
      lambda P: "reconstruction" in P.gaps("000")),
]


NOT_IN_SEED: list[N] = [
    N("003", "App. B (training protocol) is not in the seed text: package defaults (seed, batch, epochs, patience, "
      "AdamW lr / weight decay / warm-up, one validation subject)", [0, 64, 30, 5, 0.001, 0.01, 1.0, 1],
      lambda P: _one({**P.members("003", "cv"), **{f"{k}_{d}": c for k, v in P.members("003", "truncation").items()
                                                  for d, c in v}},
                     lambda c: [c["seed"], c["data"]["batch_size"], c["trainer"]["max_epochs"], c["trainer"]["patience"],
                                c["optim"]["lr"], c["optim"]["weight_decay"], c["optim"]["warmup_epochs"],
                                c["split"]["n_val_groups"]]),
      ("003/cv.yaml:seed", "003/cv.yaml:data.batch_size", "003/cv.yaml:trainer.max_epochs",
       "003/cv.yaml:trainer.patience", "003/cv.yaml:optim.*", "003/cv.yaml:split.seed", "003/cv.yaml:split.n_val_groups",
       "003/truncation_*.yaml:seed", "003/truncation_*.yaml:data", "003/truncation_*.yaml:trainer",
       "003/truncation_*.yaml:optim")),
    N("003", "App. A (heads) is not in the seed text: the main grid's foundation models use the mean head (the pooling "
      "ablation's baseline), EEGNet its flatten classifier", [["eegnet", "full", "flatten"]] + sorted(
          [m, r, "mean"] for m in FM_003 for r in ("full", "head_only")),
      lambda P: sorted(_runs(_cv(P, "eyes")), key=lambda x: (x[0] != "eegnet", x))),
    N("003", "checkpoint ids: 'publicly available pre-trained checkpoints' (§3), the ids are not named; BIOT reads "
      "the six-dataset checkpoint through braindecode's InterpolatedBIOT", {
          "biot": "braindecode/biot-pretrained-six-datasets-18chs", "cbramod": "braindecode/cbramod-pretrained",
          "labram": "braindecode/labram-pretrained", "reve": "brain-bzh/reve-base",
          "reve_truncated": "brain-bzh/reve-base", "biot kwargs": {"interpolate": True}},
      lambda P: {**{r["model"]: r["pretrained"] for c in P.members("003", "cv").values() for r in c["runs"]
                    if r.get("pretrained")}, "reve_truncated": "brain-bzh/reve-base",
                 "biot kwargs": _one(P.members("003", "cv"), lambda c: next(
                     (r.get("backbone_kwargs") for r in c["runs"] if r["model"] == "biot"), {"interpolate": True}))}),
    N("003", "Sleep-EDF's bipolar derivations (Table 6) have no LaBraM embedding nor electrode position (REVE, BIOT): "
      "its cv and sweep run EEGNet and CBraMod; the others are listed in not_runnable",
      [[["cbramod", "full", "mean"], ["cbramod", "head_only", "mean"], ["eegnet", "full", "flatten"]],
       ["eegnet", "cbramod"], True],
      lambda P: [sorted(_runs(_cv(P, "sleep_edf"))), P.m("003", "sleep_edf_sweep")["models"],
                 "LaBraM, REVE and BIOT on Sleep-EDF" in P.gaps("003")], ("003/runs_sleep_edf.yaml:runs",)),
    N("003", "paper 003 runs no confound check (the package adds one by default for cue-locked tasks)", False,
      lambda P: _one(P.members("003", "cv"), lambda c: c["confound"]["enabled"]),
      ("003/cv.yaml:confound", "003/truncation_*.yaml:confound")),
    N("003", "Sleep tasks keep their presets' reference (none): Sleep-EDF's two channels are bipolar derivations (Table 6 "
      "footnote) and the package refuses a common average over fewer than 8 channels", ["none", "none"],
      lambda P: [_reference(_cv(P, n), "eegnet") for n in ("sleep_edf", "sleep_hmc")]),
    N("003", "sweep: perturbation seed, corruption before the re-reference, region SNR on the whole montage (App. D.5 "
      "leaves it open), Holm level 0.05, batch, predictions kept",
      [0, "before_reference", "montage", 0.05, 64, True],
      lambda P: _one(P.members("003", "sweep"), lambda c: [c["seed"], c["corruption_order"], c["region_snr"],
                                                           c["alpha"], c["batch_size"], c["save_predictions"]]),
      ("003/sweep.yaml:seed", "003/sweep.yaml:corruption_order", "003/sweep.yaml:region_snr", "003/sweep.yaml:alpha",
       "003/sweep.yaml:batch_size", "003/sweep.yaml:save_predictions")),
    N("003", "probe learning rate and batch (App. I.5 gives epochs, optimiser and patience only): package defaults",
      [0.001, 64], lambda P: _one(P.members("003", "probe"), lambda c: [c["probe"]["lr"], c["probe"]["batch_size"]]),
      ("003/probe.yaml:probe.lr", "003/probe.yaml:probe.batch_size")),
    N("003", "REVE has no AttnLRP patch map here: Gradient×Input instead, recorded as such (listed in not_runnable)",
      ["gxi", True], lambda P: [_one(P.members("003", "attribute"), lambda c: c["attribution"]["lrp_fallback"]),
                                "AttnLRP maps of REVE" in P.gaps("003")],
      ("003/attribute*.yaml:attribution.lrp_fallback", "003/attribute*.yaml:attention",
       "003/attribute*.yaml:attribution.batch_size", "003/attribute_perturbed.yaml:select")),
    N("003", "truncation depths and tasks (Figure 26): REVE's blocks every four with 14 and 21, on the probing tasks",
      [2, 6, 10, 14, 18, 21], lambda P: _one(P.members("003", "truncation"), lambda v: [k for k, _ in v]),
      ("003/truncation_*.yaml:depths", "003/truncation_*.yaml:task", "003/truncation_*.yaml:experiment")),
    N("003", "dataset sizes (not in the seed text): the datasets' own structure, for the plan only",
      {"eegmmidb_eyes": 3270, "eegmmidb_mi_4class": 9810, "eegmmidb_movement_4class": 9810, "hgd": 14000,
       "ku_erp": 447120, "ku_mi": 21600},
      lambda P: {k: v["windows"] for k, v in P.paper["003"]["datasets"].items() if v["windows"]},
      ("003_beyond_accuracy.yaml:datasets.*.windows", "003_beyond_accuracy.yaml:datasets.*.subjects",
       "003_beyond_accuracy.yaml:datasets.*.source")),
    N("001", "matched random inits of the encoders Control 2 does not cover (the package fits at least one per "
      "encoder): seed 42; pooling of LaBraM / CBraMod / BIOT (not stated): mean", [[42], "mean"],
      lambda P: _one({f"{k}{m['model']}": m for k, c in P.members("001", "controls").items() for m in c["models"]
                      if m["model"] != "reve"}, lambda m: [m["init_seeds"], m["pooling"]])),
    N("001", "REVE's single random init where Control 2 does not test it, and its pooling on Sleep-EDF / CAUEEG",
      {"ad_vs_hc": "flatten", "caueeg_reve": "flatten", "caueeg_reve_lda": "flatten", "sleep_edf": "mean",
       "tuab": "flatten"},
      lambda P: {k: _model(c, "reve")["pooling"] for k, c in P.members("001", "controls").items()
                 if any(m["model"] == "reve" for m in c["models"]) and len(_model(c, "reve")["init_seeds"]) == 1},
      ("001/*.yaml:models",)),
    N("001", "seeds, folds' validation subjects, bootstrap size, the identity probe's C, loggers: package defaults",
      [0, 2000, 1.0], lambda P: [_one(P.members("001", "controls"), lambda c: c["seed"]),
                                 _one(P.members("001", "controls"), lambda c: c["bootstrap"]["n_boot"]),
                                 _one(_identity(P), lambda c: c["identity"]["C"])],
      ("001/controls.yaml:seed", "001/controls.yaml:bootstrap.n_boot", "001/controls.yaml:bootstrap.seed",
       "001/controls.yaml:permutation.seed", "001/caueeg*.yaml:identity.C", "001/caueeg*.yaml:identity.seed",
       "001/caueeg*.yaml:identity.family", "001/*.yaml:permutation", "001/controls.yaml:data",
       "001/controls.yaml:features.preprocessing", "001/controls.yaml:cv_*", "001/*.yaml:task",
       "001/*.yaml:experiment")),
    N("001", "Control 4's correct-label arm: the package reruns it on the scrambled arm's schedule (the paper's arms "
      "were unmatched; listed in not_runnable)", ["rerun", "mean", "brain-bzh/reve-base"],
      lambda P: [P.m("001", "caueeg_reve_svm")["scrambled"][0][k] for k in ("correct", "head", "pretrained")]),
    N("001", "paper 001's checkpoints: braindecode/labram-pretrained, CBraMod's public backbone, brain-bzh/reve-base "
      "(§3.1, Data availability)", ["brain-bzh/reve-base", "braindecode/cbramod-pretrained",
                                    "braindecode/labram-pretrained"],
      lambda P: sorted({m["pretrained"] for c in P.members("001", "controls").values() for m in c["models"]
                        if m["model"] in ("reve", "labram", "cbramod")})),
    N("000", "which three reference views, the validation share and the encoder schedule (J.5 not in the seed text): "
      "the eegmat demo's", [["original", "average", "Cz"], 185, 40, 8],
      lambda P: [P.m("000", "nmt_audit")["data"]["views"], P.m("000", "nmt_audit")["split"]["n_val"],
                 P.m("000", "nmt_audit")["encoder"]["max_epochs"], P.m("000", "nmt_audit")["encoder"]["patience"]],
      ("000/nmt_audit.yaml:data.*", "000/nmt_audit.yaml:split.*", "000/nmt_audit.yaml:encoder.*")),
    N("000", "NMT's size is not in the seed text beyond its 185 held-out records: the plan costs it per 1,000 windows",
      [None, None], lambda P: [P.paper["000"]["datasets"]["nmt"][k] for k in ("subjects", "windows")],
      ("000_physiotrace.yaml:datasets.nmt.*",)),
    N("000", "audit settings the seed text does not give: bootstrap size, induced odds, epsilon (audit defaults)",
      [1000, 9.0, 0.01],
      lambda P: [P.m("000", "nmt_audit")["audit"][k] for k in ("n_boot", "induced_odds", "epsilon")],
      ("000/nmt_audit.yaml:audit.*",)),
]

INFRASTRUCTURE = ("*:out_dir", "*:trainer.loggers", "*:trainer", "*:trainer.accelerator", "*:trainer.devices",
                  "*:trainer.precision", "0*_*.yaml:paper", "0*_*.yaml:title", "0*_*.yaml:throughput",
                  "0*_*.yaml:members", "0*_*.yaml:not_runnable", "0*_*.yaml:datasets.*.n_chans",
                  "0*_*.yaml:datasets.*.source", "003/tasks/*.yaml:out_dir", "000/nmt_audit.yaml:data",
                  "001/controls.yaml:cv_claims")
"""Keys that change no number (where results go, loggers, devices) or are the paper file's own structure."""


def _model(cfg: dict, name: str) -> dict:
    return next(m for m in cfg["models"] if m["model"] == name)


def _with(P: Papers, model: str) -> list:
    return [c for k, c in P.members("001", "controls").items() if k.startswith("caueeg")
            and any(m["model"] == model for m in c["models"])]


def _identity(P: Papers) -> dict:
    return {k: c for k, c in P.members("001", "controls").items() if c.get("identity")}


def _classes(task) -> list:
    from eegfm_bench.data.tasks import get_task

    return list(get_task(task).class_names)


def _reference(cfg: dict, model: str) -> str:
    from eegfm_bench.data.tasks import resolve_task_spec
    from eegfm_bench.models.backbones import BACKBONES

    return resolve_task_spec(cfg["task"]).get("reference") or BACKBONES.get(model).preprocessing.reference


def _paper_task(cfg: dict) -> str:
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.perturb.regions import paper_task

    get_task(cfg["task"])  # a declared task registers its `regions:`
    return paper_task(_task(cfg))


def _n_features(family: str, n_chans: int) -> int:
    from eegfm_bench.controls.features import n_features

    return n_features(family, n_chans)


ENTRIES = [*TRANSCRIPTIONS, *NOT_IN_SEED]


def _id(e) -> str:
    text = e.quote if isinstance(e, T) else e.why
    return f"{e.paper}-{(e.where if isinstance(e, T) else 'not-in-seed')}-{text[:40]}"


@pytest.mark.parametrize("t", ENTRIES, ids=[_id(e) for e in ENTRIES])
def test_transcription(papers, t):
    """The configs hold the value the paper's text gives (or the documented choice where it gives none)."""
    got = t.get(papers)
    assert json.loads(json.dumps(got, default=list)) == json.loads(json.dumps(t.expected, default=list)), \
        f"{t.paper} {getattr(t, 'where', 'not in the seed text')}: expected {t.expected!r}, configs give {got!r}"


@pytest.mark.parametrize("t", TRANSCRIPTIONS, ids=[_id(e) for e in TRANSCRIPTIONS])
def test_quote_in_seed_text(t):
    """Every transcription's phrase is in the paper (whitespace-normalised)."""
    found = [d / SEED_TEXT[t.paper] for d in SEED_PLACES if (d / SEED_TEXT[t.paper]).is_file()]
    assert found, (f"seed text {SEED_TEXT[t.paper]} not found in {[str(d) for d in SEED_PLACES]}; fix: set EEGFM_DATA "
                   "to the data root beside seeds/ (or put the seed texts at ../shared/seeds)")
    path = found[0]
    norm = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731
    assert norm(t.quote) in norm(path.read_text()), f"not in {path.name}: {t.quote!r}"


def _leaves(d: Any, prefix: str = "") -> list[str]:
    if isinstance(d, dict) and d:
        return [k for key, v in d.items() for k in _leaves(v, f"{prefix}.{key}" if prefix else str(key))]
    return [prefix]


def test_every_key_is_accounted_for():
    """Every key set in a file under configs/paper/ is a transcription, a documented choice or infrastructure."""
    patterns = [c for e in ENTRIES for c in e.covers] + list(INFRASTRUCTURE)
    loose = []
    for f in sorted(PAPERS.rglob("*.yaml")):
        rel = f.relative_to(PAPERS).as_posix()
        for key in _leaves(yaml.safe_load(f.read_text()) or {}):
            parts = key.split(".")
            names = [f"{rel}:{'.'.join(parts[:i])}" for i in range(1, len(parts) + 1)]
            if not any(fnmatch.fnmatch(n, p) for n in names for p in patterns):
                loose.append(f"{rel}:{key}")
    assert not loose, f"keys without a transcription or a documented choice: {loose}"


def test_a_changed_value_is_caught(tmp_path):
    """A value edited away from the paper's (the ten folds) fails its transcription."""
    root = tmp_path / "paper"
    shutil.copytree(PAPERS, root)
    cv = root / "003" / "cv.yaml"
    cv.write_text(cv.read_text().replace("  k: 10 ", "  k: 5 "))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = Papers(root)
    folds = next(t for t in TRANSCRIPTIONS if t.where == "App. I.5" and "ten folds" in t.quote)
    with pytest.raises(AssertionError, match="members differ"):
        folds.get(p)
