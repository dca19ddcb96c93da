"""Attribution report (paper 003 App. I.1-I.2): per-cell topomaps from the fold maps and the methods' labels; the
table of sanity checks (conservation, randomisation) is in :mod:`eegfm_bench.reports.attribution_checks`."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from eegfm_bench.atomic import atomic_path
from eegfm_bench.interpret.attribution import aggregate, cond_dir
from eegfm_bench.interpret.lrp import PATCH_MAPS
from eegfm_bench.interpret.topomap import plot_topomap_grid
from eegfm_bench.reports.style import fold_key, plural


def write_cell_maps(cell_dir: Path, method: str, condition: str, class_names: Sequence[str], title: str) -> dict | None:
    """Aggregate the fold npz files of one cell / condition / method; write ``maps.npz`` and ``topomap.png``."""
    d = cell_dir / cond_dir(condition) / method
    files = sorted(d.glob("fold*.npz"), key=lambda f: fold_key(f.stem[len("fold"):]))  # fold2 before fold10
    if not files:
        return None
    folds = []
    for f in files:
        z = np.load(f, allow_pickle=False)
        folds.append({"channel": z["channel"], "y": z["y"], "ch_names": [str(c) for c in z["ch_names"]]})
    names = folds[0]["ch_names"]
    if any(f["ch_names"] != names for f in folds):
        raise ValueError(f"{d}: folds differ in channels; cannot average")
    agg = aggregate(folds, len(class_names))
    with atomic_path(d / "maps.npz") as tmp_file, open(tmp_file, "wb") as fh:
        np.savez(fh, class_averaged=agg["class_averaged"], per_class=agg["per_class"],
                 fold_maps=agg["fold_maps"], ch_names=np.array(names), class_names=np.array(list(class_names)),
                 n_windows=agg["n_windows"], n_windows_per_class=np.array(agg["n_windows_per_class"]),
                 folds=np.array([f.stem for f in files]))
    maps = np.vstack([agg["class_averaged"][None], agg["per_class"]])
    cols = ["class-averaged"] + [f"{c} (n={n})" for c, n in zip(class_names, agg["n_windows_per_class"])]
    png = plot_topomap_grid({method: maps}, names, d / "topomap.png", col_titles=cols, cmap="Reds",
                            shared_scale="row", unit="mean |R| (normalised)",
                            title=f"{title}\n{plural(len(files), 'fold')}, {plural(agg['n_windows'], 'window')}")
    return {"png": png, "npz": d / "maps.npz", **agg, "ch_names": names}


def method_label(method: str, backbone: str) -> str:
    if method == "gxi":
        return "Gradient×Input"
    return PATCH_MAPS[backbone]().method if backbone in PATCH_MAPS else method
