"""Data sources: where a task's recordings come from (BIDS, braindecode datasets, MOABB, any MNE-readable file).

A source turns a task's ``root`` and its own options into :class:`Recording` entries (subject, session, run, the
file or handle to read, a recording-level class when the source gives one) and reads one recording as an
``mne.io.Raw`` exactly as stored (every channel, annotations kept, volts). Everything after that — channel policy,
ingestion checks, preprocessing, windows, labels — is shared (:mod:`eegfm_bench.data.ingest`), so a recording
gets the same treatment whatever its source.

Registered sources (``SOURCES``):

=============  ==================================================================================================
``files``      globs of files ``mne.io.read_raw`` reads (EDF, BDF, GDF, BrainVision, EEGLAB, FIF, CNT, EGI, ...);
               subject / session / run / label from a regex on the path or from a CSV
``bids``       a BIDS dataset through mne-bids (entities, ``events.tsv`` annotations, ``participants.tsv`` labels)
``braindecode`` any braindecode dataset class by name over a local copy (TUHAbnormal, NMT, CHBMIT, SIENA, ...)
``moabb``      a MOABB dataset (its raws and event ids; MOABB's fake datasets for tests)
``eegmmidb``   PhysioNet EEGMMIDB in MNE's layout (``mne.datasets.eegbci``; downloads unless EEGFM_OFFLINE=1)
=============  ==================================================================================================
"""
from __future__ import annotations

from eegfm_bench.data.sources.base import (DataNotFoundError, DataRootNotFoundError, Recording, RecordingReadError,
                                           Source, download_allowed, existing_data_root, resolve_data_root,
                                           select_subjects)
from eegfm_bench.data.sources.bids import BIDSSource
from eegfm_bench.data.sources.braindecode import BraindecodeSource
from eegfm_bench.data.sources.eegmmidb import EEGMMIDBSource
from eegfm_bench.data.sources.files import FilesSource
from eegfm_bench.data.sources.moabb import MOABBSource
from eegfm_bench.registry import Registry

SOURCES: Registry[type[Source]] = Registry("data source", entry_points="eegfm_bench.sources")
"""Every data source by name (a task's ``source:``)."""
for _cls in (FilesSource, BIDSSource, BraindecodeSource, MOABBSource, EEGMMIDBSource):
    SOURCES.register(_cls.name)(_cls)

__all__ = ["SOURCES", "Source", "Recording", "DataNotFoundError", "DataRootNotFoundError", "RecordingReadError",
           "resolve_data_root", "existing_data_root", "download_allowed", "select_subjects"]
