"""Task registry: which recordings, which labels, how windows are cut.

Three tasks on the staged data (project issue 2):

* ``eegmmidb_mi`` — EEGMMIDB runs 4, 8, 12 (motor imagery); T1 = left-fist imagery (class 0),
  T2 = right-fist imagery (class 1); one window of ``window_s`` from each cue onset; 64 channels, 160 Hz.
* ``eegmmidb_eyes`` — EEGMMIDB run 1 (eyes open, class 0) vs run 2 (eyes closed, class 1);
  non-overlapping windows.
* ``eegmat`` — PhysioNet "EEG During Mental Arithmetic Tasks": ``SubjectNN_1.edf`` (rest, class 0) vs
  ``SubjectNN_2.edf`` (serial subtraction, class 1); non-overlapping windows; the 19 EEG channels
  (``EEG A2-A1`` and ``ECG ECG`` dropped); 500 Hz.

Files are found through MNE (``mne.datasets.eegbci.load_data``) or plain paths under the data root;
the data root is resolved by :func:`resolve_data_root`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import mne
import numpy as np

from eegfm_bench.data.montage import canonical_names, standard_1005
from eegfm_bench.registry import Registry


class DataNotFoundError(FileNotFoundError):
    """Raised when recordings are missing; the message says where they go and how to get them."""


class RecordingReadError(RuntimeError):
    """Raised when a recording exists but cannot be read (e.g. a corrupted EDF)."""


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """Data root: ``data_root`` if given, else ``$EEGFM_DATA``, else MNE's data folder (``MNE_DATA`` or ``~/mne_data``)."""
    if data_root:
        return Path(data_root).expanduser()
    if os.environ.get("EEGFM_DATA"):
        return Path(os.environ["EEGFM_DATA"]).expanduser()
    return Path(mne.get_config("MNE_DATA") or Path.home() / "mne_data").expanduser()


def download_allowed(download: bool | None) -> bool:
    """Whether missing files may be fetched (default yes, unless ``EEGFM_OFFLINE=1``)."""
    if download is not None:
        return bool(download)
    return os.environ.get("EEGFM_OFFLINE", "0") not in ("1", "true", "yes")


@dataclass(frozen=True)
class Recording:
    """One EDF file and what it contributes.

    ``label`` is the class of every window for recording-labelled tasks (``None`` when labels come from
    annotations).
    """

    subject: str
    recording: str
    path: Path
    label: int | None = None


@dataclass(frozen=True)
class Task:
    """A classification task on one dataset.

    Parameters
    ----------
    name : str
        Registry name.
    dataset : str
        Dataset name (also the default provenance value of its windows).
    class_names : tuple of str
        Class names indexed by label.
    line_freq : float
        Mains frequency in Hz for the notch filter.
    native_sfreq : float
        Sampling rate of the files in Hz.
    pretraining_aliases : tuple of str
        Names under which this dataset may appear in a model's pretraining corpora (paper 001 §3.6 gate iii).
    """

    name: str
    dataset: str
    class_names: tuple[str, ...]
    line_freq: float
    native_sfreq: float
    description: str = ""
    pretraining_aliases: tuple[str, ...] = field(default_factory=tuple)

    # --- to be provided by subclasses -------------------------------------------------
    def recordings(self, root: Path, subjects: list | None = None, download: bool | None = None) -> list[Recording]:
        raise NotImplementedError

    def cut(self, raw: mne.io.BaseRaw, rec: Recording, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Cut windows from a preprocessed recording.

        Returns
        -------
        data : ndarray, shape (n_windows, n_chans, n_times)
            In the recording's unit (volts).
        y : ndarray of int64, shape (n_windows,)
        """
        raise NotImplementedError

    exclude: tuple[str, ...] = ()

    # --- shared ----------------------------------------------------------------------
    def read(self, rec: Recording) -> mne.io.BaseRaw:
        """Read one recording as EEG-only, canonical 10-05 names, standard_1005 positions, preloaded (volts).

        Raises
        ------
        RecordingReadError
            If MNE cannot parse the file (the message names the file and the fix).
        """
        try:
            raw = mne.io.read_raw_edf(rec.path, preload=True, verbose="error")
        except Exception as err:  # MNE raises bare Exception for bad annotation bytes
            raise RecordingReadError(
                f"could not read {rec.path}: {err}\nfix: the file is corrupted or truncated; delete it and fetch it "
                "again (PhysioNet / `mne.datasets.eegbci.load_data`), then compare its sha256 with the dataset's "
                "MANIFEST/registry") from err
        drop = [c for c in raw.ch_names if c in self.exclude]
        if drop:
            raw.drop_channels(drop)
        raw.rename_channels(dict(zip(raw.ch_names, canonical_names(raw.ch_names))))
        raw.set_channel_types({c: "eeg" for c in raw.ch_names}, on_unit_change="ignore")
        raw.set_montage(standard_1005(), on_missing="raise")
        return raw

    @staticmethod
    def _fixed_windows(raw: mne.io.BaseRaw, label: int, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        epochs = mne.make_fixed_length_epochs(raw, duration=window_s, overlap=0.0, preload=True,
                                              reject_by_annotation=False, verbose="error")
        data = epochs.get_data(copy=False)
        n_times = int(round(window_s * raw.info["sfreq"]))
        data = data[..., :n_times]
        return data, np.full(len(data), label, dtype=np.int64)


TASKS: Registry[Task] = Registry("task")


def _eegmmidb_dir(root: Path) -> Path:
    sub = root / "eegmmidb"
    return sub if (sub / "MNE-eegbci-data").is_dir() else root


def _eegmmidb_file(path: Path, subject: int, run: int) -> Path:
    return path / "MNE-eegbci-data" / "files" / "eegmmidb" / "1.0.0" / f"S{subject:03d}" / f"S{subject:03d}R{run:02d}.edf"


@dataclass(frozen=True)
class EEGMMIDBTask(Task):
    """EEGMMIDB (Schalk et al. 2004, PhysioNet ``eegmmidb`` 1.0.0) through ``mne.datasets.eegbci``."""

    runs: tuple[int, ...] = ()
    run_labels: tuple[tuple[int, int], ...] = ()  # (run, label) for recording-labelled tasks
    event_labels: tuple[tuple[str, int], ...] = ()  # (annotation, label) for cue-locked tasks
    default_subjects: tuple[int, ...] = tuple(range(1, 110))

    def recordings(self, root: Path, subjects: list | None = None, download: bool | None = None) -> list[Recording]:
        """EDF files for ``subjects`` (ints; default: every subject whose runs are all present locally).

        Raises
        ------
        DataNotFoundError
            Naming the missing files, the folder MNE expects and how to download them.
        """
        path = _eegmmidb_dir(root)
        if subjects is None:
            base = path / "MNE-eegbci-data" / "files" / "eegmmidb" / "1.0.0"
            found = sorted(int(p.name[1:]) for p in base.glob("S[0-9][0-9][0-9]") if p.is_dir()) if base.is_dir() else []
            subjects = [s for s in found if all(_eegmmidb_file(path, s, r).is_file() for r in self.runs)]
            if not subjects:
                if not download_allowed(None):
                    raise DataNotFoundError(self._missing_msg(path, [], found_any=False))
                subjects = list(self.default_subjects)
        subjects = [int(str(s).lstrip("Ss") or 0) for s in subjects]
        missing = [_eegmmidb_file(path, s, r) for s in subjects for r in self.runs if not _eegmmidb_file(path, s, r).is_file()]
        if missing:
            if not download_allowed(None):
                raise DataNotFoundError(self._missing_msg(path, missing))
            try:
                for s in sorted({int(p.parent.name[1:]) for p in missing}):
                    mne.datasets.eegbci.load_data(s, list(self.runs), path=str(path), update_path=False, verbose="error")
            except Exception as err:
                raise DataNotFoundError(self._missing_msg(path, missing) + f"\n(download attempt failed: {err})") from err
        recs = []
        label_of = dict(self.run_labels)
        for s in subjects:
            for r in self.runs:
                recs.append(Recording(f"S{s:03d}", f"S{s:03d}R{r:02d}", _eegmmidb_file(path, s, r), label_of.get(r)))
        return recs

    def _missing_msg(self, path: Path, missing: list[Path], found_any: bool = True) -> str:
        listed = ", ".join(str(p) for p in missing[:6]) + (" …" if len(missing) > 6 else "")
        what = f"missing files: {listed}" if missing else f"no EEGMMIDB subject with runs {list(self.runs)} under {path}"
        return (f"task {self.name!r}: {what}.\nfix: put the PhysioNet EEGMMIDB files in MNE's layout under {path} "
                f"(MNE-eegbci-data/files/eegmmidb/1.0.0/SXXX/SXXXRYY.edf), or point `data_root`/EEGFM_DATA at the "
                "folder that holds them, or allow downloading (unset EEGFM_OFFLINE) so that "
                "`mne.datasets.eegbci.load_data(subjects, runs, path=...)` fetches them from PhysioNet.")

    def read(self, rec: Recording) -> mne.io.BaseRaw:
        """Read as in :meth:`Task.read`, after ``mne.datasets.eegbci.standardize`` of the dotted names."""
        try:
            raw = mne.io.read_raw_edf(rec.path, preload=True, verbose="error")
        except Exception as err:
            raise RecordingReadError(
                f"could not read {rec.path}: {err}\nfix: the file is corrupted or truncated; delete it and fetch it "
                "again with `mne.datasets.eegbci.load_data`, then compare its sha256 with MNE's eegbci registry") from err
        mne.datasets.eegbci.standardize(raw)
        raw.rename_channels(dict(zip(raw.ch_names, canonical_names(raw.ch_names))))
        raw.set_montage(standard_1005(), on_missing="raise")
        return raw

    def cut(self, raw, rec, window_s):
        if rec.label is not None:
            return self._fixed_windows(raw, rec.label, window_s)
        want = dict(self.event_labels)
        events, ids = mne.events_from_annotations(raw, event_id={k: i + 1 for i, k in enumerate(want)}, verbose="error")
        sfreq = raw.info["sfreq"]
        n_times = int(round(window_s * sfreq))
        inv = {v: want[k] for k, v in ids.items()}
        keep = [e for e in events if e[2] in inv and e[0] - raw.first_samp + n_times <= raw.n_times]
        if not keep:
            return np.empty((0, len(raw.ch_names), n_times)), np.empty(0, dtype=np.int64)
        data = raw.get_data()
        X = np.stack([data[:, e[0] - raw.first_samp: e[0] - raw.first_samp + n_times] for e in keep])
        y = np.array([inv[e[2]] for e in keep], dtype=np.int64)
        return X, y


@dataclass(frozen=True)
class EEGMATTask(Task):
    """PhysioNet "EEG During Mental Arithmetic Tasks" (Zyma et al. 2019) as plain EDF under ``<root>/eegmat``."""

    default_subjects: tuple[int, ...] = tuple(range(36))

    def recordings(self, root: Path, subjects: list | None = None, download: bool | None = None) -> list[Recording]:
        """``SubjectNN_1.edf`` (rest, 0) and ``SubjectNN_2.edf`` (arithmetic, 1) per subject.

        Raises
        ------
        DataNotFoundError
            If the folder or files are missing (MNE has no downloader for this dataset: the message says
            where to put the PhysioNet files).
        """
        path = root / "eegmat"
        if subjects is None:
            subjects = sorted({int(p.stem[7:9]) for p in path.glob("Subject[0-9][0-9]_1.edf")
                               if (path / f"{p.stem[:9]}_2.edf").is_file()}) if path.is_dir() else []
        else:
            subjects = [int(str(s).replace("Subject", "")) for s in subjects]
        files = [(s, k, path / f"Subject{s:02d}_{k}.edf") for s in subjects for k in (1, 2)]
        missing = [f for _, _, f in files if not f.is_file()]
        if not files or missing:
            listed = ", ".join(map(str, missing[:6])) if missing else f"no SubjectNN_1.edf/SubjectNN_2.edf pairs in {path}"
            raise DataNotFoundError(
                f"task {self.name!r}: {listed}.\nfix: download PhysioNet 'eegmat' 1.0.0 "
                f"(https://physionet.org/content/eegmat/1.0.0/) and put SubjectNN_1.edf / SubjectNN_2.edf in {path}, "
                "or point `data_root`/EEGFM_DATA at the folder that holds `eegmat/`.")
        return [Recording(f"Subject{s:02d}", f"Subject{s:02d}_{k}", f, k - 1) for s, k, f in files]

    def cut(self, raw, rec, window_s):
        return self._fixed_windows(raw, int(rec.label), window_s)


TASKS.register("eegmmidb_mi")(EEGMMIDBTask(
    name="eegmmidb_mi", dataset="eegmmidb", class_names=("left_fist_imagery", "right_fist_imagery"),
    line_freq=60.0, native_sfreq=160.0, runs=(4, 8, 12), event_labels=(("T1", 0), ("T2", 1)),
    description="EEGMMIDB motor imagery, runs 4/8/12, T1 left vs T2 right fist, one window per cue onset",
    pretraining_aliases=("eegmmidb", "physionet-mi", "physionet eeg motor movement/imagery", "physionetmi")))
TASKS.register("eegmmidb_eyes")(EEGMMIDBTask(
    name="eegmmidb_eyes", dataset="eegmmidb", class_names=("eyes_open", "eyes_closed"),
    line_freq=60.0, native_sfreq=160.0, runs=(1, 2), run_labels=((1, 0), (2, 1)),
    description="EEGMMIDB baseline runs 1 (eyes open) vs 2 (eyes closed), non-overlapping windows",
    pretraining_aliases=("eegmmidb", "physionet-mi", "physionet eeg motor movement/imagery", "physionetmi")))
TASKS.register("eegmat")(EEGMATTask(
    name="eegmat", dataset="eegmat", class_names=("rest", "mental_arithmetic"), line_freq=50.0,
    native_sfreq=500.0, exclude=("EEG A2-A1", "ECG ECG"),
    description="PhysioNet eegmat, rest (_1) vs serial subtraction (_2), 19 EEG channels, non-overlapping windows",
    pretraining_aliases=("eegmat", "mental arithmetic", "physionet eegmat")))
