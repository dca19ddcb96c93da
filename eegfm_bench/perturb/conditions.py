"""Perturbation conditions: parse / format the condition strings of result rows (paper 003 App. D).

Grammar (numbers are written with ``format(v, "g")``: ``10``, ``-3``, ``0.5``):

==============================================  ======================================================
``clean``                                       no perturbation
``white_snr=<snr>dB``, ``pink_snr=<snr>dB``     additive noise on every channel (App. D.1)
``dropout_p=<p>_zero``, ``dropout_p=<p>_removed``  random channel dropout, dataset-level mask (App. D.2)
``region=<role>_zero``, ``region=<role>_removed``  region dropout (App. D.3)
``region_noise=<role>_snr=<snr>dB``             white noise on the region only (App. D.5)
``region_sub=<role>``                           region signal substitution (App. D.4, attribution only)
==============================================  ======================================================

``<role>`` is ``primary`` or ``control`` (the task's region sets of Table 6). Every condition is a frozen
object with ``name`` (its string), ``display_name`` (the perturbation type the reports label its table with),
``plot`` (its panel and level in the degradation curves, or None), ``needs_variable_channels`` (True when channels
are removed, which only models with a variable channel set accept), ``attribution_only`` and
``apply(x, ch_names, rng, ctx) -> (x_out, ch_names_out)``; ``details(ch_names, ctx)`` returns what to record
with the results (dropped channels, region channels and missing electrodes, filter settings).

Seeds: ``ctx.seed`` is the *perturbation* seed, fixed for a sweep; it alone selects the dropout masks, so
every fold, seed and model sees the same mask. The noise comes from ``rng``, always a
:class:`~eegfm_bench.perturb.rng.WindowRNG`: one numpy Generator per window, seeded with (seed, condition,
window), whose draws take numpy's arguments with ``size`` starting with the batch size (row ``i`` from window
``i``). So a perturbation depends on (seed, condition, window) only, never on the batch size or the rank.

A new condition (docs/guide/protocols.md, "Writing a perturbation condition"): subclass :class:`Condition` as a
frozen dataclass, implement ``name``, ``display_name``, ``apply`` and ``parse``, optionally ``plot``
(a :class:`PlotFamily` and a level), and register it under the head of its string with
``CONDITION_KINDS.register("<head>")`` — or, for every process (workers, ``eegfm-bench report``), declare it as an
entry point of the group ``eegfm_bench.conditions`` (name: the head, value: ``module:Class``).

Order with respect to the reference (``ctx.order``). The windows are stored after the model's
preprocessing, common average reference (CAR) included. ``"before_reference"`` (default) perturbs the signal as it
was before the reference step and then references it again over the channels present: :meth:`Condition.perturb`
applies the corruption and recomputes the CAR over the channels that are not zero-padded, then sets the zero-padded
ones to 0. Because the CAR is invariant to adding one value to every channel, this equals corrupting the
unreferenced signal and referencing afterwards — exactly, for every corruption here (noise, removal, zero-padding,
substitution) — so a removed channel can no longer be recovered from the survivors (after the old order their sum
was minus the removed ones). The noise's SNR is set on the noise as added (at the electrodes), before the reference.
``"after_reference"`` is the previous behaviour (corrupt the referenced windows, no re-reference), kept to compare.
With ``ctx.reference = "none"`` (data not re-referenced) both orders are the same.
"""
from __future__ import annotations

import abc
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from eegfm_bench.perturb.arrays import to_numpy
from eegfm_bench.perturb.channels import DROPOUT_PROBS, check_handling, dropout_mask, drop_channels
from eegfm_bench.perturb.noise import NOISE_VERSION, FilterSpec, add_noise, check_noise_kind, check_snr_db
from eegfm_bench.perturb.regions import (
    REGION_NOISE_SNRS_DB,
    REGION_ROLES,
    check_role,
    paper_task,
    region_dropout,
    region_noise,
    region_substitution,
    resolve_region,
)
from eegfm_bench.perturb.rng import WindowRNG, check_seed, condition_words
from eegfm_bench.registry import Registry, UnknownNameError

WHITE_SNRS_DB: tuple[float, ...] = (10.0, 5.0, 0.0, -3.0, -5.0, -15.0)
"""White-noise SNR levels, dB (App. D.1)."""

PINK_SNRS_DB: tuple[float, ...] = (10.0, 5.0, 0.0, -3.0, -5.0)
"""Pink-noise SNR levels, dB (App. D.1; no -15 dB level)."""

CONDITION_GRAMMAR: tuple[str, ...] = (
    "clean",
    "white_snr=<snr>dB",
    "pink_snr=<snr>dB",
    "dropout_p=<p>_zero",
    "dropout_p=<p>_removed",
    "region=<primary|control>_zero",
    "region=<primary|control>_removed",
    "region_noise=<primary|control>_snr=<snr>dB",
    "region_sub=<primary|control>",
)
"""The condition string patterns, for error messages and ``--help``."""

CONDITION_KINDS: Registry[type] = Registry("condition kind", entry_points="eegfm_bench.conditions")
"""Condition classes by the part of the string before the first ``=`` (entry point group ``eegfm_bench.conditions``)."""


class ConditionError(ValueError):
    """A condition string with an invalid value (e.g. ``dropout_p=1.5_zero``); the message names the grammar."""


@dataclass(frozen=True)
class PlotFamily:
    """A panel of the degradation curves (:func:`eegfm_bench.reports.sweep.plot_degradation_curves`): the
    conditions whose ``plot`` names the same family share it, one point per level.

    Parameters
    ----------
    title : str
        Panel title, e.g. ``"White noise"``.
    axis : str
        x-axis label, e.g. ``"SNR (dB)"``.
    clean_level : float or None
        x of the clean point on a numeric axis (dropout: ``p = 0``); None: a categorical axis, ``clean`` first and
        then the levels (tick labels are the levels).
    descending : bool
        Order the levels from high to low (SNR: the weakest perturbation has the highest level).
    xlim : tuple of float or None
        Fixed x range of a numeric axis.
    """

    title: str
    axis: str
    clean_level: float | None = None
    descending: bool = False
    xlim: tuple[float, float] | None = None


WHITE_NOISE_PANEL = PlotFamily("White noise", "SNR (dB)", descending=True)
PINK_NOISE_PANEL = PlotFamily("Pink noise", "SNR (dB)", descending=True)
DROPOUT_ZERO_PANEL = PlotFamily("Random dropout, zero-padded", "per-channel dropout probability p", clean_level=0.0,
                                xlim=(-0.03, 0.53))
DROPOUT_REMOVED_PANEL = PlotFamily("Random dropout, removed", "per-channel dropout probability p", clean_level=0.0,
                                   xlim=(-0.03, 0.53))
STANDARD_PANELS: tuple[PlotFamily, ...] = (WHITE_NOISE_PANEL, PINK_NOISE_PANEL, DROPOUT_ZERO_PANEL,
                                           DROPOUT_REMOVED_PANEL)
"""The panels every degradation figure shows (App. D.1, D.2), first; other families follow as they appear."""


@dataclass(frozen=True)
class PerturbContext:
    """What a condition needs to know about the data it perturbs.

    Parameters
    ----------
    dataset : str
        Dataset name; with ``seed`` it selects the random dropout mask (tasks of one recording set, e.g. the
        EEGMMIDB tasks, pass the same name and share the mask, as in App. D.2).
    task : str
        Task name, selecting the primary / control regions (``task_regions.yaml``).
    filter : FilterSpec
        The dataset's preprocessing filters (sampling rate, band-pass, notch), applied to all noise.
    seed : int
        Perturbation seed, fixed for the whole sweep (not the training seed).
    """

    dataset: str
    task: str
    filter: FilterSpec
    seed: int
    reference: str = "none"
    order: str = "before_reference"
    region_power: str = "montage"
    mask: str = "paper"

    def __post_init__(self) -> None:
        for name, valid in (("reference", REFERENCES), ("order", ORDERS), ("region_power", REGION_POWERS),
                            ("mask", MASK_RULES)):
            if getattr(self, name) not in valid:
                raise ValueError(f"PerturbContext.{name}={getattr(self, name)!r}; valid: {', '.join(valid)}")

    def as_dict(self) -> dict[str, Any]:
        """The settings that change the perturbed windows (for the sweep's config hash and its rows)."""
        return {"filter": self.filter.as_dict(), "reference": self.reference, "order": self.order,
                "region_power": self.region_power, "mask": self.mask, "noise_version": NOISE_VERSION}


REFERENCES = ("average", "none")
"""The data's reference: common average (re-applied after a corruption) or none."""
ORDERS = ("before_reference", "after_reference")
"""Corruption order with respect to the reference (module docstring); the first is the default."""
REGION_POWERS = ("montage", "region")
"""Region noise SNR basis (App. D.5): the whole montage's signal power (default, as the authors' code) or the
region's."""
MASK_RULES = ("paper", "hashed")
"""Random dropout mask rule (App. D.2, :mod:`eegfm_bench.perturb.channels`): the paper's (default) or per-channel
hashes (order-independent)."""


def rereference(x: Any, ch_names: Sequence[str], zeroed: Sequence[str] = ()) -> Any:
    """Common average reference over the channels present, zero-padded channels set to 0 afterwards.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    zeroed : sequence of str
        Zero-padded channels: left out of the average and set to 0.

    Returns
    -------
    same type, dtype and device as ``x``
    """
    arr, restore = to_numpy(x, ch_names)
    zero = {str(c).upper() for c in zeroed}
    present = np.array([str(c).upper() not in zero for c in ch_names])
    out = arr.astype(np.float64, copy=True)
    out[:, present] -= out[:, present].mean(axis=1, keepdims=True)
    out[:, ~present] = 0.0
    return restore(out.astype(arr.dtype, copy=False))


def _window_rng(rng: WindowRNG | int, condition: "Condition", x: Any) -> WindowRNG:
    if isinstance(rng, WindowRNG):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return WindowRNG.from_seed(int(rng), condition.name, len(x))
    raise TypeError(f"rng must be a WindowRNG or an int seed, got {type(rng).__name__}; fix: pass "
                    "WindowRNG.for_windows(seed, condition.name, window_uids) or an int seed")


def _fmt(v: float) -> str:
    return format(float(v) + 0.0, "g")  # + 0.0 turns -0.0 into 0.0


def _number(text: str, what: str, condition: str) -> float:
    try:
        return float(text)
    except ValueError as err:
        raise ValueError(f"condition {condition!r}: {what} {text!r} is not a number") from err


class Condition(abc.ABC):
    """A test-time perturbation of paper 003 App. D (see the module docstring for the grammar)."""

    needs_variable_channels: bool = False
    attribution_only: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The condition string written in result rows."""

    @property
    @abc.abstractmethod
    def display_name(self) -> str:
        """The perturbation type the reports label this condition's table with (e.g. ``"white noise (SNR in dB)"``);
        conditions with the same display name share one table on the page."""

    @property
    def plot(self) -> tuple[PlotFamily, float] | None:
        """The degradation-curve panel this condition is drawn in and its level on the panel's x axis; None (the
        default): not plotted."""
        return None

    @abc.abstractmethod
    def apply(self, x: Any, ch_names: Sequence[str], rng: WindowRNG,
              ctx: PerturbContext) -> tuple[Any, list[str]]:
        """Perturb a batch of windows.

        Parameters
        ----------
        x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
            Clean windows, µV.
        ch_names : sequence of str
            Channel names of ``x`` (standard 10-05 names).
        rng : WindowRNG
            Noise source: one numpy Generator per window of ``x`` (``rng[i]``), and numpy's draws with ``size``
            starting with the batch size, row ``i`` from window ``i`` (:class:`~eegfm_bench.perturb.rng.WindowRNG`);
            unused by conditions without noise. Draw only through it, per window: a perturbation depends on
            (seed, condition, window) only, never on the batch size or the rank.
        ctx : PerturbContext
            Dataset, task, filters and perturbation seed.

        Returns
        -------
        x_out : same type, dtype and device as ``x``; shape (batch, n_chans_out, n_times)
        ch_names_out : list of str
            Channel names of ``x_out`` (fewer than ``ch_names`` for ``*_removed`` conditions).
        """

    def details(self, ch_names: Sequence[str], ctx: PerturbContext) -> dict[str, Any]:
        """What to record with this condition's results (JSON-serialisable)."""
        return {"condition": self.name}

    def zeroed_channels(self, ch_names: Sequence[str], ctx: PerturbContext) -> list[str]:
        """Channels this condition zero-pads (left out of the re-reference and kept at 0)."""
        return []

    def perturb(self, x: Any, ch_names: Sequence[str], rng: WindowRNG | int,
                ctx: PerturbContext) -> tuple[Any, list[str]]:
        """:meth:`apply`, then — with a common-average-referenced dataset and ``ctx.order = "before_reference"`` —
        the reference recomputed over the channels present (module docstring). What the sweep and attribution call.

        Parameters
        ----------
        x, ch_names, ctx : as :meth:`apply`
        rng : WindowRNG or int
            The windows' noise source; an int seed stands for ``WindowRNG.from_seed(seed, self.name, len(x))``
            (windows numbered 0 .. n−1).

        Returns
        -------
        x_out, ch_names_out : as :meth:`apply`

        Raises
        ------
        TypeError
            If ``rng`` is neither a ``WindowRNG`` nor an int (a single Generator would tie the noise to the batch).
        """
        out, names = self.apply(x, ch_names, _window_rng(rng, self, x), ctx)
        if ctx.reference == "average" and ctx.order == "before_reference":
            out = rereference(out, names, self.zeroed_channels(ch_names, ctx))
        return out, names

    @classmethod
    @abc.abstractmethod
    def parse(cls, head: str, value: str | None, text: str) -> "Condition":
        """Build the condition from ``head=value`` (``text`` is the whole string, for errors)."""

    def __str__(self) -> str:
        return self.name


@CONDITION_KINDS.register("clean")
@dataclass(frozen=True)
class Clean(Condition):
    """No perturbation: the windows are returned as they are."""

    @property
    def name(self) -> str:
        return "clean"

    @property
    def display_name(self) -> str:
        return "clean"

    def apply(self, x, ch_names, rng, ctx):
        to_numpy(x, ch_names)  # shape and name checks only
        return x, list(ch_names)

    def perturb(self, x, ch_names, rng, ctx):
        return self.apply(x, ch_names, rng, ctx)  # the windows as they are (already referenced)

    @classmethod
    def parse(cls, head, value, text):
        if value is not None:
            raise UnknownNameError(f"condition {text!r}: 'clean' takes no value")
        return cls()


@dataclass(frozen=True)
class AdditiveNoise(Condition):
    """White or pink noise on every channel at a per-trial SNR (App. D.1).

    Parameters
    ----------
    kind : {"white", "pink"}
        Noise colour.
    snr_db : float
        Target SNR, dB; must be finite.
    """

    kind: str
    snr_db: float

    def __post_init__(self) -> None:
        check_noise_kind(self.kind)
        object.__setattr__(self, "snr_db", check_snr_db(self.snr_db))

    @property
    def name(self) -> str:
        return f"{self.kind}_snr={_fmt(self.snr_db)}dB"

    @property
    def display_name(self) -> str:
        return f"{self.kind} noise (SNR in dB)"

    @property
    def plot(self) -> tuple[PlotFamily, float]:
        return (WHITE_NOISE_PANEL if self.kind == "white" else PINK_NOISE_PANEL), self.snr_db

    def apply(self, x, ch_names, rng, ctx):
        to_numpy(x, ch_names)
        return add_noise(x, self.snr_db, self.kind, ctx.filter, rng), list(ch_names)

    def details(self, ch_names, ctx):
        return {"condition": self.name, "noise": self.kind, "snr_db": self.snr_db, "filter": ctx.filter.as_dict(),
                "order": ctx.order}

    @classmethod
    def parse(cls, head, value, text):
        m = re.fullmatch(r"(.+)dB", value or "")
        if m is None:
            raise UnknownNameError(f"condition {text!r}: expected {head}=<snr>dB, e.g. {head}=-5dB")
        return cls(head.split("_")[0], _number(m.group(1), "SNR", text))


CONDITION_KINDS.register("white_snr")(AdditiveNoise)
CONDITION_KINDS.register("pink_snr")(AdditiveNoise)


@CONDITION_KINDS.register("dropout_p")
@dataclass(frozen=True)
class ChannelDropout(Condition):
    """Random channel dropout with the dataset-level mask of ``(ctx.seed, ctx.dataset, p)`` (App. D.2).

    Parameters
    ----------
    p : float
        Per-channel dropout probability in (0, 1).
    handling : {"zero", "removed"}
        Zero-pad or remove the dropped channels.
    """

    p: float
    handling: str

    def __post_init__(self) -> None:
        check_handling(self.handling)
        p = float(self.p)
        if not (math.isfinite(p) and 0.0 < p < 1.0):
            raise ValueError(f"dropout probability must be in (0, 1), got {self.p}")
        object.__setattr__(self, "p", p)

    @property
    def needs_variable_channels(self) -> bool:  # type: ignore[override]
        return self.handling == "removed"

    @property
    def name(self) -> str:
        return f"dropout_p={_fmt(self.p)}_{self.handling}"

    @property
    def display_name(self) -> str:
        return "random channel dropout, " + ("zero-padded" if self.handling == "zero" else "channels removed")

    @property
    def plot(self) -> tuple[PlotFamily, float]:
        return (DROPOUT_ZERO_PANEL if self.handling == "zero" else DROPOUT_REMOVED_PANEL), self.p

    def apply(self, x, ch_names, rng, ctx):
        mask = dropout_mask(ch_names, self.p, ctx.seed, ctx.dataset, rule=ctx.mask)
        return drop_channels(x, ch_names, mask.dropped, self.handling)

    def zeroed_channels(self, ch_names, ctx):
        if self.handling != "zero":
            return []
        return list(dropout_mask(ch_names, self.p, ctx.seed, ctx.dataset, rule=ctx.mask).dropped)

    def details(self, ch_names, ctx):
        return {"condition": self.name, "handling": self.handling, "order": ctx.order,
                **dropout_mask(ch_names, self.p, ctx.seed, ctx.dataset, rule=ctx.mask).as_dict()}

    @classmethod
    def parse(cls, head, value, text):
        m = re.fullmatch(r"(.+)_([a-z]+)", value or "")
        if m is None:
            raise UnknownNameError(f"condition {text!r}: expected dropout_p=<p>_zero or dropout_p=<p>_removed")
        return cls(_number(m.group(1), "probability", text), m.group(2))


@CONDITION_KINDS.register("region")
@dataclass(frozen=True)
class RegionDropout(Condition):
    """Zero-pad or remove the task's primary or control region (App. D.3).

    Parameters
    ----------
    role : {"primary", "control"}
        Region set of Table 6.
    handling : {"zero", "removed"}
        Zero-pad or remove the region's channels.
    """

    role: str
    handling: str

    def __post_init__(self) -> None:
        check_role(self.role)
        check_handling(self.handling)

    @property
    def needs_variable_channels(self) -> bool:  # type: ignore[override]
        return self.handling == "removed"

    @property
    def name(self) -> str:
        return f"region={self.role}_{self.handling}"

    @property
    def display_name(self) -> str:
        return "region removal, " + ("zero-padded" if self.handling == "zero" else "channels removed")

    def apply(self, x, ch_names, rng, ctx):
        return region_dropout(x, ch_names, ctx.task, self.role, self.handling)[:2]

    def zeroed_channels(self, ch_names, ctx):
        if self.handling != "zero":
            return []
        return list(resolve_region(ctx.task, self.role, ch_names, warn=False).channels)

    def details(self, ch_names, ctx):
        return {"condition": self.name, "handling": self.handling, "order": ctx.order,
                **resolve_region(ctx.task, self.role, ch_names, warn=False).as_dict()}

    @classmethod
    def parse(cls, head, value, text):
        m = re.fullmatch(r"(.+)_([a-z]+)", value or "")
        if m is None:
            raise UnknownNameError(f"condition {text!r}: expected region=<primary|control>_<zero|removed>")
        return cls(m.group(1), m.group(2))


@CONDITION_KINDS.register("region_noise")
@dataclass(frozen=True)
class RegionNoise(Condition):
    """Filtered white noise on the region's channels (App. D.5), at an SNR against the whole montage's signal power
    (``ctx.region_power = "montage"``, default, as the authors' code) or the region's (``"region"``).

    Parameters
    ----------
    role : {"primary", "control"}
        Region set of Table 6.
    snr_db : float
        Target SNR over the region, dB; must be finite (paper: 5, -3).
    """

    role: str
    snr_db: float

    def __post_init__(self) -> None:
        check_role(self.role)
        object.__setattr__(self, "snr_db", check_snr_db(self.snr_db))

    @property
    def name(self) -> str:
        return f"region_noise={self.role}_snr={_fmt(self.snr_db)}dB"

    @property
    def display_name(self) -> str:
        return "region noise"

    def apply(self, x, ch_names, rng, ctx):
        return region_noise(x, ch_names, ctx.task, self.role, self.snr_db, ctx.filter, rng,
                            power=ctx.region_power)[:2]

    def details(self, ch_names, ctx):
        return {"condition": self.name, "noise": "white", "snr_db": self.snr_db, "filter": ctx.filter.as_dict(),
                "power": ctx.region_power, "order": ctx.order,
                **resolve_region(ctx.task, self.role, ch_names, warn=False).as_dict()}

    @classmethod
    def parse(cls, head, value, text):
        m = re.fullmatch(r"(.+)_snr=(.+)dB", value or "")
        if m is None:
            raise UnknownNameError(f"condition {text!r}: expected region_noise=<primary|control>_snr=<snr>dB")
        return cls(m.group(1), _number(m.group(2), "SNR", text))


@CONDITION_KINDS.register("region_sub")
@dataclass(frozen=True)
class RegionSubstitution(Condition):
    """Replace the region's channels by filtered white noise at the intact channels' RMS (App. D.4).

    The paper uses it for attribution only, not for accuracy (``attribution_only = True``).

    Parameters
    ----------
    role : {"primary", "control"}
        Region set of Table 6.
    """

    role: str
    attribution_only: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_role(self.role)

    @property
    def name(self) -> str:
        return f"region_sub={self.role}"

    @property
    def display_name(self) -> str:
        return "region substitution"

    def apply(self, x, ch_names, rng, ctx):
        return region_substitution(x, ch_names, ctx.task, self.role, ctx.filter, rng)[:2]

    def details(self, ch_names, ctx):
        return {"condition": self.name, "filter": ctx.filter.as_dict(),
                **resolve_region(ctx.task, self.role, ch_names, warn=False).as_dict()}

    @classmethod
    def parse(cls, head, value, text):
        if not value:
            raise UnknownNameError(f"condition {text!r}: expected region_sub=<primary|control>")
        return cls(value)


def parse_condition(text: str) -> Condition:
    """Parse a condition string (see the module docstring for the grammar).

    Parameters
    ----------
    text : str
        E.g. ``"clean"``, ``"white_snr=-5dB"``, ``"dropout_p=0.5_removed"``, ``"region_noise=primary_snr=5dB"``.

    Returns
    -------
    Condition
        ``parse_condition(s).name == s`` for strings written in canonical form.

    Raises
    ------
    UnknownNameError
        Unknown condition kind, region role or channel handling (the message lists the valid ones).
    ConditionError
        A non-finite SNR, a probability outside (0, 1) or another bad value (a ``ValueError``; names the condition
        and the grammar).
    """
    head, sep, value = text.strip().partition("=")
    try:
        cls = CONDITION_KINDS.get(head)
    except UnknownNameError as err:
        raise UnknownNameError(
            f"unknown condition {text!r}. Valid conditions: {', '.join(CONDITION_GRAMMAR)}.\n"
            f"{str(err).splitlines()[0]}"
        ) from None
    try:
        return cls.parse(head, value if sep else None, text)
    except UnknownNameError:
        raise
    except ValueError as err:
        hint = "" if "fix:" in str(err) else f"; fix: a condition string of the form {', '.join(CONDITION_GRAMMAR)}"
        raise ConditionError(f"condition {text!r}: {err}{hint}") from None


def format_condition(condition: Condition | str) -> str:
    """The canonical string of a condition (a string is parsed and re-formatted)."""
    return (parse_condition(condition) if isinstance(condition, str) else condition).name


def default_conditions(task: str, variable_channels: bool, *, include_substitution: bool = False) -> list[Condition]:
    """All App. D conditions for a task and model, clean first.

    Order: clean; white noise at 10, 5, 0, -3, -5, -15 dB; pink noise at 10, 5, 0, -3, -5 dB; random dropout
    p = 0.1, 0.3, 0.5 zero-padded (then removed); primary and control region zero-padded (then removed);
    region noise primary 5, -3 dB, control 5, -3 dB; optionally region substitution of the primary region.

    Parameters
    ----------
    task : str
        Task name (validated against ``task_regions.yaml``).
    variable_channels : bool
        The model accepts a variable channel set: add the ``*_removed`` conditions (App. D.2, D.3).
    include_substitution : bool
        Add ``region_sub=primary`` (App. D.4), which the paper uses for attribution only, not accuracy.

    Returns
    -------
    list of Condition
        21 conditions, 26 with ``variable_channels`` (+1 with ``include_substitution``).

    Raises
    ------
    UnknownNameError
        If ``task`` has no region assignment.
    """
    paper_task(task)
    out: list[Condition] = [Clean()]
    out += [AdditiveNoise("white", s) for s in WHITE_SNRS_DB]
    out += [AdditiveNoise("pink", s) for s in PINK_SNRS_DB]
    handlings = ("zero", "removed") if variable_channels else ("zero",)
    out += [ChannelDropout(p, h) for h in handlings for p in DROPOUT_PROBS]
    out += [RegionDropout(r, h) for h in handlings for r in REGION_ROLES]
    out += [RegionNoise(r, s) for r in REGION_ROLES for s in REGION_NOISE_SNRS_DB]
    if include_substitution:
        out.append(RegionSubstitution("primary"))
    return out


def condition_rng(seed: int, condition: Condition | str) -> np.random.Generator:
    """A numpy Generator for one condition, a function of the perturbation seed and the condition string.

    For the noise functions called directly (:func:`~eegfm_bench.perturb.noise.add_noise`, ...). A condition's
    ``apply`` receives a :class:`~eegfm_bench.perturb.rng.WindowRNG` instead (one Generator per window), so that
    its perturbation does not depend on the batch.

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    """
    return np.random.default_rng(condition_words(check_seed(seed), format_condition(condition)))
