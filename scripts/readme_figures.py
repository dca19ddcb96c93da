"""Regenerate every figure and table the README quotes, from the commands it names.

Runs (unless ``--render-only``) the README's quickstart commands, each as its own process, timed with
``/usr/bin/time -v`` when it exists (wall, user and system CPU, peak RSS)::

    eegfm-bench cv        --config configs/experiment/quickstart.yaml
    eegfm-bench sweep     --config configs/experiment/sweep_quickstart.yaml
    eegfm-bench probe     --config configs/experiment/interpret_quickstart.yaml
    eegfm-bench attribute --config configs/experiment/interpret_quickstart.yaml
    eegfm-bench confound  --cv results/quickstart --variations offset band offset+band
    eegfm-bench cv        --config configs/experiment/positive_control_eegmmidb_eyes.yaml

then rewrites the README's blocks between ``<!-- figures:<name> -->`` and ``<!-- /figures:<name> -->`` from the result
files those commands wrote (``results/quickstart/...``): the quickstart table and its cost, the condensed robustness
table, the block-probe ranges and the attribution checks. Timings are kept in ``results/quickstart/readme_timings.json``
so that ``--render-only`` can rewrite the blocks without rerunning. Every number in those blocks comes from a file a
command wrote at the commit the script ran on (its ``code_version`` column).

Usage::

    EEGFM_DATA=../shared/data python scripts/readme_figures.py                      # everything, in order
    EEGFM_DATA=../shared/data python scripts/readme_figures.py --parallel           # sweep / probe / attribute together
    python scripts/readme_figures.py --render-only                                  # rewrite the README blocks
    EEGFM_CACHE=/tmp/fresh python scripts/readme_figures.py --steps cv              # the cv alone, on an empty cache
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "quickstart"
STEPS = {
    "cv": ["cv", "--config", "configs/experiment/quickstart.yaml"],
    "sweep": ["sweep", "--config", "configs/experiment/sweep_quickstart.yaml"],
    "probe": ["probe", "--config", "configs/experiment/interpret_quickstart.yaml"],
    "attribute": ["attribute", "--config", "configs/experiment/interpret_quickstart.yaml"],
    "confound": ["confound", "--cv", "results/quickstart", "--variations", "offset", "band", "offset+band"],
    "eyes": ["cv", "--config", "configs/experiment/positive_control_eegmmidb_eyes.yaml"],
}
SWEEP_COLUMNS = [("white_snr=0dB", "white 0 dB"), ("white_snr=-15dB", "white −15 dB"), ("pink_snr=-5dB", "pink −5 dB"),
                 ("dropout_p=0.5_zero", "dropout p=0.5 zero-padded"), ("dropout_p=0.5_removed", "p=0.5 removed"),
                 ("region=primary_zero", "region primary, zero-padded")]


# ------------------------------------------------------------------------------------------------ running
def _time_cmd(args: list[str], log: Path) -> list[str]:
    exe = shutil.which("eegfm-bench") or sys.executable
    cmd = [exe, *args] if exe.endswith("eegfm-bench") else [exe, "-m", "eegfm_bench.cli", *args]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    return ([timer, "-v", "-o", str(log)] if timer else []) + cmd + ["--no-progress"]


def _parse_time(log: Path) -> dict:
    out = {}
    if not log.is_file():
        return out
    text = log.read_text()
    for key, pat in (("user_s", r"User time \(seconds\): ([\d.]+)"), ("system_s", r"System time \(seconds\): ([\d.]+)"),
                     ("max_rss_kb", r"Maximum resident set size \(kbytes\): (\d+)")):
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if m:  # the process's own wall time (waiting on concurrent processes in turn would overstate the later ones)
        parts = [float(v) for v in m.group(1).split(":")]
        out["elapsed_s"] = round(sum(v * 60 ** i for i, v in enumerate(reversed(parts))), 1)
    return out


def _failures(out: Path) -> list:
    path = out / "failures.json"
    return json.loads(path.read_text() or "[]") if path.is_file() else []


def _refuse_dirty_tree() -> None:
    """Refuse to run the commands on a tree with uncommitted changes to tracked files: every row would carry a
    ``.dirty`` code version (e.g. the README blocks an earlier ``render`` rewrote, before a later ``--steps``)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                         text=True)
    if out.returncode == 0 and out.stdout.strip():
        raise SystemExit("uncommitted changes to tracked files (results would be labelled .dirty):\n"
                         f"{out.stdout.rstrip()}\nfix: commit or stash them (the README blocks a previous run "
                         "rewrote included), then run the steps again; --render-only needs no clean tree")


def run_steps(steps: list[str], parallel: bool) -> dict:
    """Run the steps (cv first; with ``parallel`` the others together), return their timings.

    Raises
    ------
    SystemExit
        On a tree with uncommitted changes to tracked files (:func:`_refuse_dirty_tree`), or when a command fails.
    """
    _refuse_dirty_tree()
    OUT.mkdir(parents=True, exist_ok=True)
    timings_path = OUT / "readme_timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    order = [s for s in STEPS if s in steps]
    batches = [["cv"]] if "cv" in order else []
    rest = [s for s in order if s not in ("cv", "confound", "eyes")]  # the retraining steps run alone, at the end
    batches += [rest] if parallel else [[s] for s in rest]
    batches += [["confound"]] if "confound" in order else []
    batches += [["eyes"]] if "eyes" in order else []
    for batch in batches:
        procs = {}
        for s in batch:
            log = OUT / f"readme_time_{s}.txt"
            out = open(OUT / f"readme_{s}.log", "w")
            procs[s] = (subprocess.Popen(_time_cmd(STEPS[s], log), cwd=REPO, stdout=out, stderr=subprocess.STDOUT),
                        time.time(), log, out)
            print(f"started {' '.join(STEPS[s])}", flush=True)
        for s, (p, t0, log, out) in procs.items():
            rc = p.wait()
            out.close()
            wall = time.time() - t0
            if rc != 0:
                raise SystemExit(f"{' '.join(STEPS[s])} failed (rc {rc}); see {OUT / f'readme_{s}.log'}")
            parsed = _parse_time(log)
            timings[s] = {"wall_s": parsed.pop("elapsed_s", round(wall, 1)), "concurrent_with": [x for x in batch if x != s],
                          "cpus": os.cpu_count(), **parsed}
            print(f"done {s}: {wall:.0f} s", flush=True)
        timings_path.write_text(json.dumps(timings, indent=1))
    return timings


# ------------------------------------------------------------------------------------------------ rendering
def _mmss(s: float) -> str:
    m, s = divmod(int(round(s)), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def _cost(t: dict) -> str:
    parts = [f"**{_mmss(t['wall_s'])} wall**"]
    if "user_s" in t:
        parts.append(f"{t['user_s']:.0f} s user + {t['system_s']:.0f} s system CPU")
    if "max_rss_kb" in t:
        parts.append(f"{t['max_rss_kb'] / 1e6:.1f} GB peak RSS")
    return ", ".join(parts)


def _code_versions(*paths: Path, condition: str | None = None) -> str:
    vs = set()
    for p in paths:
        if p.is_file():
            df = pd.read_csv(p)
            if condition is not None and "condition" in df:
                df = df[df["condition"] == condition]
            if "code_version" in df:
                vs |= set(df["code_version"].astype(str))
    return ", ".join(sorted(vs)) or "?"


def _summary_tables(out: Path) -> tuple[list[str], list[str], str]:
    """The headline table, the headline-and-confound-checked table and its legend from a cv's ``summary.md``."""
    text = (out / "summary.md").read_text()
    head, _, rest = text.partition("## Headline and confound-checked")
    side = [ln for ln in rest.splitlines() if ln.startswith("|")]
    legend = next((ln for ln in rest.splitlines() if ln.startswith("Verdict:")), "")
    return [ln for ln in head.splitlines() if ln.startswith("|")], side, legend


def _split_cost(out: Path) -> str:
    p = out / "timing.json"
    if not p.is_file():
        return ""
    t = json.loads(p.read_text())
    return f" ({_mmss(t['headline_s'])} for the headline cells, {_mmss(t['confound_s'])} for the confound check)"


def block_quickstart(t: dict) -> str:
    table, side, legend = _summary_tables(OUT)
    rows = pd.read_csv(OUT / "results.csv")
    n_cells = rows[(rows.metric == "balanced_accuracy") & (rows.condition == "clean")].groupby(
        ["model", "regime", "head", "fold"]).ngroups
    cost = _cost(t["cv"]) if "cv" in t else "(not timed)"
    lines = [
        f"Measured on this project's {t.get('cv', {}).get('cpus', '?')}-core CPU machine (no GPU) by "
        f"`scripts/readme_figures.py` (code `{_code_versions(OUT / 'results.csv', condition='clean')}`): {cost}"
        f"{_split_cost(OUT)}, {n_cells} headline cells and their confound check, "
        f"{'no failures' if not _failures(OUT) else 'SEE failures.json'}. "
        "The tables it prints (also `results/quickstart/summary.md`; mean ± std over the 5 test folds, window-level):",
        "", *table]
    if side:
        lines += ["", "The headline beside the confound-checked score (run by default for every event-locked task; "
                  "windows from 1 s after the cue, 4–40 Hz; the checked score and Δ with their 95 % subject-cluster "
                  "intervals):", "", *side, "", legend]
    return "\n".join(lines)


def block_eyes(t: dict) -> str:
    out = REPO / "results" / "positive_control_eyes"
    if not (out / "summary.md").is_file():
        raise FileNotFoundError(f"no {out / 'summary.md'}")
    table, side, legend = _summary_tables(out)
    cost = _cost(t["eyes"]) if "eyes" in t else "(not timed)"
    return "\n".join([
        f"`eegfm-bench cv --config configs/experiment/positive_control_eegmmidb_eyes.yaml` ({cost}{_split_cost(out)}; "
        f"code `{_code_versions(out / 'results.csv', condition='clean')}`): eyes open vs closed, the 7 staged subjects "
        "with baseline runs, one subject per test fold, the quickstart's models; the check's variations for fixed "
        "windows: the 4–40 Hz band and the montage without the frontal electrodes:", "", *side, "", legend])


def block_sweep(t: dict) -> str:
    from eegfm_bench.reports.sweep import add_labels, fold_deltas
    from eegfm_bench.results import ResultStore

    sw = OUT / "sweep"
    df = ResultStore(sw).load()
    if df.empty:  # no sweep was run: leave the README block as it is
        raise FileNotFoundError(f"no sweep results under {sw}")
    df = add_labels(df)
    d = fold_deltas(df)
    means = d.groupby(["label", "condition"])["delta_pp"].mean().unstack()
    zero_noise = [c for c in means.columns if not c.endswith("_removed")]
    lines = ["| model | " + " | ".join(h for _, h in SWEEP_COLUMNS) +
             f" | Average ({len(zero_noise)} zero-padded / noise conditions) |", "|---" * (len(SWEEP_COLUMNS) + 2) + "|"]
    na = df[df.metric == "not_applicable"].groupby("label")["condition"].apply(set).to_dict()
    for lab in means.index:
        cells = []
        for c, _ in SWEEP_COLUMNS:
            if c in means.columns and np.isfinite(means.loc[lab, c]):
                cells.append(f"{means.loc[lab, c]:+.1f}".replace("-", "−"))
            else:
                why = "fixed channels" if lab.startswith("eegnet") else "flatten head"
                cells.append(f"n/a ({why})" if c in na.get(lab, set()) else "–")
        avg = means.loc[lab, zero_noise].mean()
        lines.append(f"| {lab} | " + " | ".join(cells) + f" | {avg:+.1f} |".replace("-", "−"))
    n_folds = int(df["fold"].nunique())
    timing = ", ".join(f"{s} {_mmss(t[s]['wall_s'])}" for s in ("sweep", "probe", "attribute") if s in t)
    conc = any(t.get(s, {}).get("concurrent_with") for s in ("sweep", "probe", "attribute"))
    note = next((t[s]["note"] for s in ("sweep", "probe", "attribute") if t.get(s, {}).get("note")), "")
    return "\n".join([
        f"Measured on this project's 2-core CPU (no GPU){', the three running concurrently' if conc else ''}{note} ({timing}; code "
        f"`{_code_versions(sw / 'results.csv')}`). Condensed from `results/quickstart/sweep/sweep.md` (Δ balanced "
        f"accuracy in percentage points from clean, mean over the {n_folds} folds; LaBraM random init; with "
        f"{n_folds} folds no Wilcoxon test can reach α = 0.05, so no ∗/∇ marks; noise drawn per window from "
        "(seed, condition, window)):", "", *lines])


def block_probes(t: dict) -> str:
    tab = pd.read_csv(OUT / "interpret" / "probes" / "probe_table.csv")

    def rng(model, curve, pooling):
        s = tab[(tab.model == model) & (tab.curve == curve) & (tab.pooling == pooling)].sort_values("block")["mean"]
        return s

    lab_f, lab_m = rng("labram", "frozen", "flatten"), rng("labram", "frozen", "mean")
    ee = tab[(tab.model == "eegnet") & (tab.pooling == "flatten")]
    ft = ee[ee.curve.str.startswith("fine-tuned")].sort_values("block")["mean"].tolist()
    fr = ee[ee.curve == "frozen"].sort_values("block")["mean"].tolist()
    return (f"Block-wise probes (`results/quickstart/interpret/probes/`): random-init LaBraM's flatten + RMSNorm probe "
            f"reaches {lab_f.min():.3f}–{lab_f.max():.3f} balanced accuracy over its {len(lab_f)} blocks, the "
            f"mean-pooled probe {lab_m.min():.3f}–{lab_m.max():.3f}; EEGNet's fine-tuned blocks "
            f"{' / '.join(f'{v:.3f}' for v in ft)} (flatten; its frozen random init {' / '.join(f'{v:.3f}' for v in fr)}).")


def block_attribution(t: dict) -> str:
    root = OUT / "interpret" / "attribution"
    df = pd.read_csv(root / "results.csv")

    def stat(model, head, metric):
        v = df[(df.model == model) & (df["head"] == head) & (df.metric == metric) & (df.condition == "clean")]["value"]
        return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if len(v) > 1 else (f"{v.mean():.3f}" if len(v) else "–")

    z = np.load(root / "eegnet-full-flatten" / "clean" / "gxi" / "maps.npz")
    names = [str(c) for c in z["ch_names"]]
    cm = z["class_averaged"]
    top = [names[i] for i in np.argsort(-cm)[:6]]
    at = {c: cm[names.index(c)] for c in ("C3", "C4") if c in names}
    return (f"AttnLRP conservation with biases zeroed (`attribution/checks.md`, mean ± SD over folds): input relevance / "
            f"logit {stat('labram', 'flatten', 'attnlrp:conservation_ratio')} (LaBraM flatten head), "
            f"{stat('labram', 'mean', 'attnlrp:conservation_ratio')} (LaBraM mean head); closure (input + the share "
            f"the softmax rule absorbs) {stat('labram', 'mean', 'attnlrp:conservation_closure')} (mean head), "
            f"{stat('labram', 'flatten', 'attnlrp:conservation_closure')} (flatten head). EEGNet's class-averaged "
            f"Gradient×Input topomap puts its largest relevance on {', '.join(top)} (mean |R| "
            f"{cm.max():.3f} at {top[0]} vs {' / '.join(f'{v:.3f}' for v in at.values())} at "
            f"{' / '.join(at)}) " + ("rather than over the motor cortex — a pattern worth checking for ocular or muscle "
                                     "artefacts before reading these accuracies as motor imagery decoding."
                                     if not any(t.upper().startswith(("C", "FC", "CP")) for t in top[:3]) else
                                     "among the sensorimotor electrodes."))


def block_confound(t: dict) -> str:
    from eegfm_bench.reports.confound import current_rows

    c = current_rows(OUT)
    if c.empty:
        raise FileNotFoundError(f"no current confound rows in {OUT / 'confound.csv'}")
    conds = list(dict.fromkeys(c["condition"]))
    lines = ["| model | regime | head | headline | " + " | ".join(f"`{x}`" for x in conds) + " |",
             "|---" * (4 + len(conds)) + "|"]
    for (m, r, h), g in c.groupby(["model", "regime", "head"], sort=True):
        first = g.iloc[0]
        cells = []
        for x in conds:
            row = g[g.condition == x]
            if row.empty:
                cells.append("–")
                continue
            row = row.iloc[0]
            cells.append(f"{row.variation_mean:.3f} (Δ {row.delta:+.3f} [{row.low:+.3f}, {row.high:+.3f}])"
                         .replace("-", "−"))
        lines.append(f"| {m} | {r} | {h} | {first.headline_mean:.3f} ± {first.headline_sd:.3f} | " + " | ".join(cells)
                     + " |")
    timing = f"{_mmss(t['confound']['wall_s'])} wall" if "confound" in t else "not timed"
    return "\n".join([
        f"`eegfm-bench confound --cv results/quickstart` ({timing}; code "
        f"`{_code_versions(*(OUT / 'confound').glob('*/results.csv'))}`): every headline cell retrained on the same "
        "folds and seeds with the windows starting 1 s after the cue (same end, so 3 s), in the 4–40 Hz band, and "
        "both (`results/quickstart/confound.md`). Balanced accuracy, mean over the 5 folds; Δ = confound-checked − "
        "headline, paired on the same windows, with its 95 % subject-cluster bootstrap interval:", "", *lines])


BLOCKS = {"quickstart": block_quickstart, "sweep": block_sweep, "probes": block_probes,
          "attribution": block_attribution, "confound": block_confound, "eyes": block_eyes}


PAGES = (REPO / "README.md",)  # the files that hold figure blocks


def render(timings: dict) -> list[str]:
    """Rewrite every ``figures:<name>`` block of the README and the quickstart guide page; return the names done."""
    done = []
    for page in PAGES:
        text = page.read_text()
        for name, fn in BLOCKS.items():
            pat = re.compile(rf"(<!-- figures:{name} -->\n)(.*?)(\n<!-- /figures:{name} -->)", re.S)
            if not pat.search(text):
                continue
            try:
                body = fn(timings)
            except FileNotFoundError as err:
                print(f"figures:{name}: {err}; block left as it was")
                continue
            text = pat.sub(lambda m: m.group(1) + body + m.group(3), text)
            done.append(f"{name} ({page.relative_to(REPO)})")
        page.write_text(text)
    missing = [n for n in BLOCKS if not any(d.startswith(n + " ") for d in done)]
    if missing:
        print("no block rewritten for:", ", ".join(missing))
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", nargs="+", choices=tuple(STEPS), default=list(STEPS))
    p.add_argument("--parallel", action="store_true", help="run sweep, probe and attribute at the same time")
    p.add_argument("--render-only", action="store_true", help="rewrite the README blocks from existing results")
    a = p.parse_args(argv)
    timings_path = OUT / "readme_timings.json"
    timings = run_steps(a.steps, a.parallel) if not a.render_only else (
        json.loads(timings_path.read_text()) if timings_path.is_file() else {})
    for s, t in timings.items():  # timings written before the elapsed time was parsed
        elapsed = _parse_time(OUT / f"readme_time_{s}.txt").get("elapsed_s")
        if elapsed is not None:
            t["wall_s"] = elapsed
    print("rewrote README blocks:", ", ".join(render(timings)) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
