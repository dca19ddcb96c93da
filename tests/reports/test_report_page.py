"""The experiment page (issue 14): every command refreshes ``report.html``; opened in headless Chromium (Debian's
``chromium``) every section the results hold is on the page, every image decodes, no script error is logged,
the tables sort, and the numbers in the tables are the result stores'.

Real staged EEG (EEGMMIDB motor imagery, 6 subjects, 3 folds): a tiny cv (EEGNet full fine-tuning, LaBraM
head-only with the mean and flatten heads), its sweep, probes and attribution in sub-folders, and a tiny
controls run on eegmat. Without Chromium the browser tests are skipped, unless ``EEGFM_REQUIRE_CHROMIUM=1`` (CI
installs it) makes that a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_testutils import requires_data

pytestmark = requires_data

TINY_EEGNET = {"F1": 4, "D": 1, "kernel_length": 16}
TINY_LABRAM = {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("EEGFM_REQUIRE_CHROMIUM"),
                                    reason="no headless Chromium (apt-get install chromium)")

CHECK_HEAD = """<script>window.__errors = []; window.addEventListener("error", function (e) {
  window.__errors.push(String(e.message)); });</script>"""
CHECK_BODY = """<script>window.addEventListener("load", function () {
  var out = {errors: window.__errors, images: [], sections: [], tables: {}, sorted: null, title: document.title,
             h1: document.querySelector("h1").textContent, notes: [], commands: null, captions: []};
  document.querySelectorAll("ul.notes li").forEach(function (li) { out.notes.push(li.textContent); });
  document.querySelectorAll("figcaption").forEach(function (c) { out.captions.push(c.textContent); });
  var cmd = document.querySelector("pre[data-commands]");
  if (cmd) { out.commands = cmd.textContent; }
  Array.prototype.forEach.call(document.images, function (i) { out.images.push(i.naturalWidth); });
  document.querySelectorAll("section").forEach(function (s) { out.sections.push(s.dataset.section); });
  function rows(t) { return Array.prototype.map.call(t.tBodies[0].rows, function (r) {
    return Array.prototype.map.call(r.cells, function (c) { return c.textContent; }); }); }
  document.querySelectorAll("table[data-table]").forEach(function (t) { out.tables[t.dataset.table] = rows(t); });
  var clean = document.querySelector('table[data-table="clean"]');
  if (clean) {
    var ths = clean.tHead.rows[0].cells, col = -1;
    for (var i = 0; i < ths.length; i++) { if (ths[i].textContent === "balanced_accuracy") { col = i; } }
    ths[col].click();
    out.sorted = rows(clean).map(function (r) { return r[col]; });
  }
  var pre = document.createElement("pre"); pre.id = "__check"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def _chrome(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    assert CHROMIUM, "EEGFM_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'chrome-profile'}", "--hide-scrollbars"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


def browse(html: Path, tmp: Path) -> dict:
    """Open a copy of the page with the checking scripts added; return what they saw (DOM after load)."""
    text = html.read_text()
    probe = tmp / f"check_{html.parent.name}.html"
    probe.write_text(text.replace("<head>", "<head>" + CHECK_HEAD, 1).replace("</body>", CHECK_BODY + "</body>", 1))
    p = _chrome(["--virtual-time-budget=10000", "--dump-dom", probe.as_uri()], tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    start = p.stdout.index('<pre id="__check">') + len('<pre id="__check">')
    import html as _html

    return json.loads(_html.unescape(p.stdout[start:p.stdout.index("</pre>", start)]))


def _run(args):
    from eegfm_bench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*args, "--no-progress"]) == 0


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    root = tmp_path_factory.mktemp("page")
    cv = {"experiment": "page", "task": "eegmmidb_mi", "out_dir": str(root / "qs"), "seed": 0,
          "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 6, "batch_size": 16},
          "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
          "trainer": {"max_epochs": 2, "patience": 2},
          "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"], "backbone_kwargs": TINY_EEGNET},
                   {"model": "labram", "regime": "head_only", "heads": ["mean", "flatten"],
                    "backbone_kwargs": TINY_LABRAM}]}
    (root / "cv.yaml").write_text(yaml.safe_dump(cv))
    _run(["cv", "--config", str(root / "cv.yaml")])
    sweep = {"cv_out_dir": str(root / "qs"), "out_dir": str(root / "qs" / "sweep"), "reference": "eegnet",
             "conditions": ["clean", "white_snr=0dB", "pink_snr=-5dB", "dropout_p=0.3_zero", "dropout_p=0.3_removed"],
             "trainer": {"loggers": ["csv", "wandb"]}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    _run(["sweep", "--config", str(root / "sweep.yaml")])
    interp = {"cv_dir": str(root / "qs"), "out_dir": str(root / "qs" / "interpret"),
              "probe": {"poolings": ["mean", "flatten"], "max_epochs": 2},
              "attention": {"enabled": True, "models": ["labram"], "max_windows_per_fold": 6},
              "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 3,
                              "conservation_windows": 1, "randomisation_windows": 2, "batch_size": 3}}
    (root / "interp.yaml").write_text(yaml.safe_dump(interp))
    _run(["probe", "--config", str(root / "interp.yaml")])
    _run(["attribute", "--config", str(root / "interp.yaml")])
    ctrl = {"experiment": "page_controls", "task": "eegmat", "out_dir": str(root / "controls"), "seed": 0,
            "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
            "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
            "features": {"families": ["simple"]},
            "models": [{"model": "eegnet", "init_seeds": [0], "pooling": "mean", "backbone_kwargs": TINY_EEGNET}],
            "permutation": {"n": 3, "families": "strongest"}, "bootstrap": {"n_boot": 100}, "scrambled": [],
            "identity": None}
    (root / "controls.yaml").write_text(yaml.safe_dump(ctrl))
    _run(["controls", "--config", str(root / "controls.yaml")])
    # a row of an older config of a cell (another hash): stored, but never on the page
    from eegfm_bench.results import ResultStore

    store = ResultStore(root / "qs")
    stale = store.load().iloc[[0]].copy()
    stale["config_hash"], stale["metric"], stale["value"] = "stale0000000", "balanced_accuracy", 0.0
    store.append(stale.to_dict("records"))
    from eegfm_bench.cli import main

    assert main(["report", str(root / "qs")]) == 0
    return root


def html_text(folder: Path) -> str:
    return (folder / "report.html").read_text()


def _current(folder: Path) -> pd.DataFrame:
    from eegfm_bench.results import ResultStore

    df = ResultStore(folder).load()
    hashes = {str(h["config_hash"]) if isinstance(h, dict) else str(h)
              for h in json.loads((folder / "cells.json").read_text())}
    return df[df["config_hash"].astype(str).isin(hashes)]


def test_every_command_refreshes_the_experiment_page(experiment):
    page = experiment / "qs" / "report.html"
    md = (experiment / "qs" / "report.md").read_text()
    assert page.is_file() and (experiment / "controls" / "report.html").is_file()
    html = page.read_text()
    for anchor in ('id="run"', 'id="clean"', 'id="pooling"', 'id="robustness"', 'id="probes"', 'id="attribution"'):
        assert anchor in html, anchor
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # nothing fetched
    assert "Init of every model: eegnet: random; labram: random" in md
    assert html.count("data:image/png;base64,") >= 5  # folds, curves, probes, attention, topomaps: embedded
    # trackers: every backbone group of the sweep (EEGNet; LaBraM's two heads share one) is its own wandb run per fold
    runs = sorted((experiment / "qs" / "sweep" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 * 3, runs


@needs_chromium
def test_the_page_in_chromium_shows_every_section_image_and_the_stores_numbers(experiment, tmp_path):
    from eegfm_bench.reports.probes import probe_table
    from eegfm_bench.reports.sweep import add_labels, degradation_table, fold_deltas

    qs = experiment / "qs"
    seen = browse(qs / "report.html", tmp_path)
    assert seen["errors"] == []
    assert seen["images"] and all(w > 0 for w in seen["images"]), seen["images"]
    assert seen["sections"] == ["run", "clean", "confound", "pooling", "robustness", "probes", "attribution"]
    # clean table = mean ± SD over folds of the cv store's current rows
    df = _current(qs)
    ba = df[(df.metric == "balanced_accuracy") & (df.condition == "clean")].copy()
    ba["value"] = ba["value"].astype(float)
    want = {(m, r, h): f"{g.value.mean():.3f} ± {g.value.std(ddof=1):.3f}" for (m, r, h), g in
            ba.groupby(["model", "regime", "head"])}
    got = {(row[0], row[2], row[3]): row[4] for row in seen["tables"]["clean"]}
    assert got == want
    # beside every score: the test windows / subjects of each fold and the chance level (issue 24)
    n = df[(df.metric == "balanced_accuracy") & (df.condition == "clean")]
    want_n = {}
    for (m, r, h), g in n.groupby(["model", "regime", "head"]):
        w, sub = g.n_windows.astype(int), g.n_subjects.astype(int)
        span = lambda v: str(v.min()) if v.min() == v.max() else f"{v.min()}-{v.max()}"  # noqa: E731
        want_n[(m, r, h)] = f"{span(w)} / {span(sub)}"
    assert {(row[0], row[2], row[3]): row[-2] for row in seen["tables"]["clean"]} == want_n
    assert {row[-1] for row in seen["tables"]["clean"]} == {"0.500"}
    assert any("chance level (dashed)" in c for c in seen["captions"])
    # per-class recall per cell, in the one fixed model order (model, regime, head)
    rec = seen["tables"]["recall"]
    assert [tuple(r[:3]) for r in rec] == sorted(tuple(r[:3]) for r in rec) and len(rec) == 3
    # the confound check ran by default: checked score with its interval, Δ with its interval, a verdict
    conf = seen["tables"]["confound"]
    assert conf and all(r[4] == "confound=offset1s+band4-40" for r in conf)
    assert all(r[8].split(" — rests on one subject (")[0] in ("survives", "partly", "does not survive") for r in conf)
    assert all(r[6].startswith("[") and "[" in r[7] for r in conf)
    assert any(nt.startswith("Verdict: survives") for nt in seen["notes"])
    # the experiment's name in the title, folders relative to the page, the commands that reproduce it
    assert seen["title"].startswith("page: eegfm_bench report") and seen["h1"] == seen["title"]
    folders = {r[0]: r[-1] for r in seen["tables"]["folders"]}
    assert folders["qs"] == "." and folders["sweep"] == "sweep"
    assert seen["commands"].splitlines()[0] == f"eegfm-bench cv --config {qs / 'config.yaml'}"
    assert f"eegfm-bench sweep --config {qs / 'sweep' / 'sweep.yaml'}" in seen["commands"]
    assert f"eegfm-bench attribute --config {qs / 'interpret' / 'attribution' / 'interpret.yaml'}" in seen["commands"]
    # clicking the header sorts the rows by the mean, ascending
    means = [float(v.split(" ± ")[0]) for v in seen["sorted"]]
    assert means == sorted(means) and len(means) == 3
    # pooling table: LaBraM mean vs flatten with their head parameter counts
    pool = {row[3]: row for row in seen["tables"]["pooling"]}
    hp = df[(df.metric == "head_params") & (df.model == "labram")].groupby("head").value.mean()
    assert {h: int(pool[h][6].replace(",", "")) for h in pool} == {h: int(round(v)) for h, v in hp.items()}
    # robustness: one table per perturbation type, Δ pp from the sweep store
    sw = add_labels(_current(qs / "sweep"))
    means_w, marks_w, _ = degradation_table(fold_deltas(sw), ["white_snr=0dB"], reference="eegnet")
    wt = seen["tables"]["robustness:white noise (SNR in dB)"]
    white = {row[0]: row[2].split(" [")[0] for row in wt}
    assert white == {lab: f"{means_w.loc[lab, 'white_snr=0dB']:+.1f}" + marks_w.loc[lab, "white_snr=0dB"]
                     for lab in means_w.index}
    assert [row[0] for row in wt] == sorted(row[0] for row in wt)  # one fixed order, not ranked
    clean_sw = sw[(sw.metric == "balanced_accuracy") & (sw.condition == "clean")].assign(
        value=lambda x: x.value.astype(float)).groupby("label").value.mean()
    assert {row[0]: row[1] for row in wt} == {lab: f"{clean_sw[lab]:.3f}" for lab in white}
    for row in wt:  # Δ with its 95 % subject-cluster interval, which holds the point estimate
        lo, hi = (float(x) for x in row[2].split(" [")[1].rstrip("]").split(", "))
        assert lo <= float(row[2].split(" [")[0].rstrip("∗∇")) + 0.05 and hi >= lo
    assert "No ∗/∇ marks: with 3 folds the smallest two-sided Wilcoxon p is 0.25" in html_text(qs)
    assert {"robustness:pink noise (SNR in dB)", "robustness:random channel dropout, zero-padded",
            "robustness:random channel dropout, channels removed"} <= set(seen["tables"])
    # probes: per block, mean ± SD over folds of the probe store
    pt = probe_table(_current(qs / "interpret" / "probes").query("metric.str.startswith('probe_bacc_block')",
                                                                 engine="python"))
    want_p = {(r.model, r.curve, r.pooling, str(int(r.block))): f"{r.mean:.3f} ± {r.std:.3f}" for r in pt.itertuples()}
    assert {(r[0], r[1], r[2], r[3]): r[5] for r in seen["tables"]["probes"]} == want_p
    # attribution checks from the attribution store
    at = _current(qs / "interpret" / "attribution")
    ratio = at[(at.metric == "gxi:n_selected")].groupby(["model", "regime", "head"]).value.mean()
    got_a = {(r[0], r[1], r[2]): float(r[5].split(" ± ")[0]) for r in seen["tables"]["attribution"]
             if r[4] == "gxi:n_selected"}
    assert got_a == {k: pytest.approx(v, abs=5e-4) for k, v in ratio.items()}
    shot = tmp_path / "shot.png"
    p = _chrome([f"--screenshot={shot}", "--window-size=1280,2000", (qs / "report.html").as_uri()], tmp_path)
    assert p.returncode == 0 and shot.stat().st_size > 10_000


@needs_chromium
def test_the_controls_page_shows_the_gate_table(experiment, tmp_path):
    seen = browse(experiment / "controls" / "report.html", tmp_path)
    assert seen["errors"] == [] and seen["sections"] == ["run", "controls"]
    gates = json.loads((experiment / "controls" / "gates.json").read_text())
    got = {row[0]: [c.split(":")[0] for c in row[1:5]] for row in seen["tables"]["gates"]}
    assert got == {g["model"]: [x["status"] for x in g["gates"]] for g in gates}
    rep = json.loads((experiment / "controls" / "controls_report.json").read_text())
    paired = {row[0]: row for row in seen["tables"]["controls_paired"]}
    for name, pr in rep["paired"].items():  # Δ with its interval beside both scores (issue 24)
        b = pr["levels"]["window"]["bootstrap"]
        assert paired[name][4] == f"{b['estimate']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]"
        assert paired[name][2] == f"{b['estimate_a']:.3f}" and paired[name][3] == f"{b['estimate_b']:.3f}"
    scores = {row[0]: row[3] for row in seen["tables"]["controls_scores"]}
    for name, s in rep["scores"].items():
        v = np.asarray(s["auroc_window"], float)
        assert scores[name] == f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"


def test_report_of_a_folder_without_results_names_the_fix(tmp_path):
    from eegfm_bench.reports.page import run_report

    with pytest.raises(FileNotFoundError, match="nothing to report.*fix: pass the out_dir"):
        run_report([tmp_path])
    with pytest.raises(FileNotFoundError, match="no folder"):
        run_report([tmp_path / "missing"])


def test_recall_per_class_and_a_fold_that_predicts_one_class_is_flagged(tmp_path):
    """A fold whose predictions are all one class gets a flag naming its AUROC (balanced accuracy is chance by
    construction there); per-class recall is the mean over folds of the crafted predictions."""
    from eegfm_bench.reports.page import _recall_table

    rows = []
    for fold, preds in ((0, [0, 0, 1, 1]), (1, [0, 0, 0, 0])):  # fold 1 predicts class 0 for every window
        p = pd.DataFrame({"index": range(4), "y": [0, 0, 1, 1],
                          "p0": [0.9 if k == 0 else 0.2 for k in preds], "p1": [0.1 if k == 0 else 0.8 for k in preds]})
        if fold == 1:
            p["p0"], p["p1"] = [0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]  # ranks perfectly, threshold does not
        path = tmp_path / "predictions" / f"eegnet-full-flatten-x-fold{fold}.csv"
        path.parent.mkdir(exist_ok=True)
        p.to_csv(path, index=False)
        base = {"model": "eegnet", "regime": "full", "head": "flatten", "fold": fold, "predictions": str(path)}
        rows += [{**base, "metric": "balanced_accuracy", "value": 1.0 if fold == 0 else 0.5},
                 {**base, "metric": "auroc", "value": 1.0}]
    table, flags = _recall_table(tmp_path, pd.DataFrame(rows), ["left", "right"])
    assert table.columns == ["model", "regime", "head", "recall left", "recall right", "folds"]
    (row,) = table.rows
    assert [c.text for c in row[3:]] == ["1.000 ± 0.000", "0.500 ± 0.707", "2"]
    assert len(flags) == 1 and "fold 1 predicts one class for every window (left)" in flags[0]
    assert "AUROC is 1.000" in flags[0]


def test_the_reproduce_block_names_the_confound_command_that_added_variations(tmp_path):
    """The quickstart's page holds the cv's own offset+band rows and the offset and band rows that
    ``eegfm-bench confound --cv`` added: the reproduce block must give that command too (with the offset / band it
    used where they differ from the config's), and no confound command when the cv's own rows are all there is."""
    from dataclasses import replace

    from eegfm_bench.reports.page import confound_commands, discover, reproduce_commands
    from eegfm_bench.reports.page import SAVED_CONFIGS

    saved = {"out_dir": "results/quickstart",
             "confound": {"enabled": True, "variations": ["offset+band"], "offset_s": 1.0, "band": [4.0, 40.0]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))  # read back as the typed cv config, as the page does
    (tmp_path / "cells.json").write_text("[]")
    cfg = SAVED_CONFIGS["cv"](tmp_path / "config.yaml")

    def store(conds):
        pd.DataFrame({"condition": conds, "model": "eegnet"}).to_csv(tmp_path / "confound.csv", index=False)

    store(["confound=offset1s+band4-40"])
    assert confound_commands(tmp_path, cfg) == []
    store(["confound=offset1s+band4-40", "confound=band4-40", "confound=offset1s"])
    assert confound_commands(tmp_path, cfg) == [
        "eegfm-bench confound --cv results/quickstart --variations offset band"]
    # and in the page's block, after the cv command
    assert reproduce_commands(discover([tmp_path], SAVED_CONFIGS)) == [
        "eegfm-bench cv --config results/quickstart/config.yaml",
        "eegfm-bench confound --cv results/quickstart --variations offset band",
        "eegfm-bench report results/quickstart"]
    store(["confound=offset1s+band4-40", "confound=offset0.5s", "confound=band8-30", "confound=frontal"])
    assert sorted(confound_commands(tmp_path, cfg)) == sorted([
        "eegfm-bench confound --cv results/quickstart --variations frontal",
        "eegfm-bench confound --cv results/quickstart --variations offset --offset-s 0.5",
        "eegfm-bench confound --cv results/quickstart --variations band --band 8 30"])
    store(["confound=offset1s+band4-40"])  # a cv with `confound: off` whose check was run by the command
    assert confound_commands(tmp_path, replace(cfg, confound=replace(cfg.confound, enabled=False))) == [
        "eegfm-bench confound --cv results/quickstart --variations offset+band"]


def test_a_saved_config_of_another_version_is_a_one_line_error_naming_the_fix(tmp_path):
    """The page reads each folder's saved config through its command's parser into the typed config: a key this
    version does not know (a config.yaml an older version saved) stops the page with one line naming the file, the
    key and the fix, from the Python API and from ``eegfm-bench report`` (no traceback)."""
    from eegfm_bench.config import ConfigError
    from eegfm_bench.reports.page import run_report

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"out_dir": str(tmp_path), "old_setting": 1}))
    (tmp_path / "cells.json").write_text("[]")
    with pytest.raises(ConfigError) as err:
        run_report([tmp_path])
    msg = str(err.value)
    assert "\n" not in msg and "config.yaml" in msg and "old_setting" in msg and "fix:" in msg
    cli = subprocess.run(["eegfm-bench", "report", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert "ConfigError" in cli.stderr and "old_setting" in cli.stderr and "fix:" in cli.stderr


def test_class_names_come_from_the_saved_ingest_report_and_else_from_the_task(tmp_path):
    """The page reads a cv run's class names from its ``ingest_report.json`` (so ``report`` needs no MNE); a run
    saved before the report recorded them has them resolved from its config's task; neither gives []."""
    from types import SimpleNamespace

    from eegfm_bench.reports.page import _class_names

    cfg = SimpleNamespace(task="eegmmidb_eyes")
    assert _class_names(tmp_path, cfg) == ["eyes_open", "eyes_closed"]  # no report: the preset's label order
    assert _class_names(tmp_path, None) == []
    rep = {"k1": {"task": "t", "models": ["eegnet"]}, "k2": {"task": "t", "class_names": ["rest", "left", "right"]}}
    (tmp_path / "ingest_report.json").write_text(json.dumps(rep))
    assert _class_names(tmp_path, cfg) == ["rest", "left", "right"]  # what the cv saved, not the config's task
    assert _class_names(tmp_path, None) == ["rest", "left", "right"]
