"""A data source: EDF files named ``<subject>_<condition>.edf`` in the task's ``root``, the file name's
condition giving the class of the whole recording (``Subject00_1.edf``: subject ``Subject00``, condition ``1``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import mne

from eegfm_bench.config import ConfigRecord
from eegfm_bench.data.sources import SOURCES
from eegfm_bench.data.sources.base import Recording, Source, select_subjects


@dataclass(frozen=True)
class NamedEDFOptions(ConfigRecord):
    """Options of the ``named_edf`` source (the task's ``named_edf:`` section).

    Args:
        conditions: file-name condition -> class name.
    """

    conditions: dict = field(default_factory=dict)


@SOURCES.register("named_edf")
class NamedEDFSource(Source):
    """EDF files ``<subject>_<condition>.edf`` in the task's root; the condition gives the class."""

    name = "named_edf"
    options = NamedEDFOptions  # the schema its section is checked against (unknown keys refused)

    def recordings(self, subjects=None):
        recs = []
        for path in sorted(self.root.glob("*.edf")):
            subject, condition = re.match(r"^(\w+?)_(\w+)$", path.stem).groups()
            recs.append(Recording(subject=subject, recording=path.stem, path=path,
                                  label=self.opts.conditions[condition]))
        return select_subjects(recs, subjects, f"task {self.spec.name!r}")

    def read(self, rec):
        # the recording as stored: every channel, volts, annotations kept; the rest of ingestion is shared
        return mne.io.read_raw_edf(rec.path, preload=True, verbose="error")
