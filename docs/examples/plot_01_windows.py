"""
Windows and their provenance
============================

Load the eegmat task (rest vs serial subtraction) for two subjects under EEGNet's preprocessing, read what
ingestion did to every recording, and look at the class-averaged spectrum of the windows.

``load_windows`` runs the same ingestion as ``eegfm-bench ingest`` and ``cv``: channel names normalised to 10-05,
the mains notch, the band-pass, polyphase resampling, then the common average over the final channel set; the
windows are cached under a hash of the task, each file's sha256 and the preprocessing.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy.signal import welch

import eegfm_bench as eb

prep = eb.BACKBONES.get("eegnet").preprocessing  # the values the backbone declares: 128 Hz, 1-40 Hz, µV
print(prep)
ws = eb.load_windows("eegmat", prep, subjects=[0, 1], progress=False)
print(f"{len(ws)} windows of {ws.X.shape[1]} channels x {ws.n_times} samples at {ws.sfreq:g} Hz; "
      f"classes {ws.class_names}; subjects {sorted(set(map(str, ws.subject)))}")

# %%
# ``ws.X`` reads windows from the cache's per-recording entries on demand (the corpus is on disk once);
# ``np.asarray`` reads them all into one array. Every window is re-referenced over the channels it keeps: the mean
# over channels is zero up to float32 rounding.
X = np.asarray(ws.X)
print("largest |channel mean| over all windows (µV):", float(np.abs(X.mean(axis=1)).max()))

# %%
# The class-averaged power spectrum (Welch, 2 s segments), averaged over channels.
f, pxx = welch(X, fs=ws.sfreq, nperseg=int(2 * ws.sfreq), axis=-1)
fig, ax = plt.subplots(figsize=(6, 3.5))
for k, name in enumerate(ws.class_names):
    ax.semilogy(f, pxx[ws.y == k].mean(axis=(0, 1)), label=name)
ax.set(xlabel="frequency (Hz)", ylabel="power (µV²/Hz)", xlim=(0, 45), title="eegmat, 2 subjects")
ax.legend()
fig.tight_layout()
