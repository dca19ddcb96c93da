"""``source: eegmmidb``: PhysioNet EEG Motor Movement/Imagery (Schalk et al. 2004) in MNE's downloader layout.

Files are ``<root>/MNE-eegbci-data/files/eegmmidb/1.0.0/SXXX/SXXXRYY.edf`` (``root`` defaults to ``eegmmidb`` under
the data root, or the data root itself when it holds ``MNE-eegbci-data``). Missing runs are fetched by
``mne.datasets.eegbci.load_data`` unless ``EEGFM_OFFLINE=1``. Channel names are standardised with
``mne.datasets.eegbci.standardize`` (``Fc5.`` → ``FC5``) before the shared channel policy.
"""
from __future__ import annotations

from pathlib import Path

import mne

from eegfm_bench.data.sources.base import DataNotFoundError, Recording, RecordingReadError, Source, download_allowed
from eegfm_bench.config.task import EEGMMIDBOptions


def eegmmidb_dir(root: Path) -> Path:
    sub = root / "eegmmidb"
    return sub if (sub / "MNE-eegbci-data").is_dir() else root


def eegmmidb_file(path: Path, subject: int, run: int) -> Path:
    return path / "MNE-eegbci-data" / "files" / "eegmmidb" / "1.0.0" / f"S{subject:03d}" / f"S{subject:03d}R{run:02d}.edf"


class EEGMMIDBSource(Source):
    """EEGMMIDB runs through ``mne.datasets.eegbci`` (see the module docstring)."""

    name = "eegmmidb"
    options = EEGMMIDBOptions

    def recordings(self, subjects=None) -> list[Recording]:
        """EDF files for ``subjects`` (ints or ``SXXX``; default: every subject whose runs are all present).

        Raises
        ------
        DataNotFoundError
            Naming the missing files, the folder MNE expects and how to download them.
        """
        runs = [int(r) for r in self.opts.runs]
        path = eegmmidb_dir(self.root)
        if subjects is None:
            base = path / "MNE-eegbci-data" / "files" / "eegmmidb" / "1.0.0"
            found = sorted(int(p.name[1:]) for p in base.glob("S[0-9][0-9][0-9]") if p.is_dir()) if base.is_dir() else []
            subjects = [s for s in found if all(eegmmidb_file(path, s, r).is_file() for r in runs)]
            self.skipped = {f"S{s:03d}": f"runs {[r for r in runs if not eegmmidb_file(path, s, r).is_file()]} not on "
                                         f"disk under {path} (the subject folder exists)"
                            for s in found if s not in subjects}
            if not subjects:
                if not download_allowed():
                    raise DataNotFoundError(self._missing_msg(path, []))
                subjects = list(self.opts.default_subjects)
        subjects = [int(str(s).lstrip("Ss") or 0) for s in subjects]
        missing = [eegmmidb_file(path, s, r) for s in subjects for r in runs if not eegmmidb_file(path, s, r).is_file()]
        if missing:
            if not download_allowed():
                raise DataNotFoundError(self._missing_msg(path, missing))
            try:
                for s in sorted({int(p.parent.name[1:]) for p in missing}):
                    mne.datasets.eegbci.load_data(s, runs, path=str(path), update_path=False, verbose="error")
            except Exception as err:  # noqa: BLE001
                raise DataNotFoundError(self._missing_msg(path, missing) + f"\n(download attempt failed: {err})") from err
        labels = {int(k): v for k, v in (self.opts.run_labels or {}).items()}
        return [Recording(f"S{s:03d}", f"S{s:03d}R{r:02d}", eegmmidb_file(path, s, r), labels.get(r), run=str(r))
                for s in subjects for r in runs]

    def _missing_msg(self, path: Path, missing: list[Path]) -> str:
        listed = ", ".join(str(p) for p in missing[:6]) + (" …" if len(missing) > 6 else "")
        runs = self.opts.runs
        what = f"missing files: {listed}" if missing else f"no EEGMMIDB subject with runs {list(runs)} under {path}"
        return (f"task {self.spec.name!r}: {what}.\nfix: put the PhysioNet EEGMMIDB files in MNE's layout under {path} "
                f"(MNE-eegbci-data/files/eegmmidb/1.0.0/SXXX/SXXXRYY.edf), or point `data_root`/EEGFM_DATA at the "
                "folder that holds them, or allow downloading (unset EEGFM_OFFLINE) so that "
                "`mne.datasets.eegbci.load_data(subjects, runs, path=...)` fetches them from PhysioNet.")

    def read(self, rec: Recording):
        try:
            raw = mne.io.read_raw_edf(rec.path, preload=True, verbose="warning")
        except Exception as err:  # noqa: BLE001
            raise RecordingReadError(
                f"could not read {rec.path}: {err}\nfix: the file is corrupted or truncated; delete it and fetch it "
                "again with `mne.datasets.eegbci.load_data`, then compare its sha256 with MNE's eegbci registry") from err
        mne.datasets.eegbci.standardize(raw)
        ren = {int(k): v for k, v in (self.opts.events_by_run or {}).items()}.get(int(rec.run or 0))
        if ren:
            present = {k: v for k, v in ren.items() if k in set(raw.annotations.description)}
            if present:
                raw.annotations.rename(present)
        return raw
