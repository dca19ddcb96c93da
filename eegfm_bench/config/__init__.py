"""Typed configs for every command (jsonargparse, as LightningCLI): ``--config`` files plus dotted overrides.

Each command declares its schema as dataclasses (``eegfm_bench.config.<command>``; its loader and checks beside the command, ``eegfm_bench.runs.<family>``); :func:`command_parser` turns
one into a jsonargparse parser with ``--config`` (repeatable; later files override earlier ones) and a
``--<key>.<subkey>`` option for every field, so

    eegfm-bench sweep --config configs/experiment/sweep_quickstart.yaml --trainer.devices 2

works for every command. The ``trainer:`` section accepts every argument of ``lightning.Trainer`` (strategy,
devices, num_nodes, precision incl. ``bf16-mixed``, accumulate_grad_batches, gradient_clip_val, ...) plus the
package's own ``patience`` (early stopping on validation balanced accuracy) and ``loggers``
(``[csv, tensorboard, wandb]``, or mappings ``{name: wandb, project: ...}`` with logger arguments). Unknown keys
are refused with the closest valid ones; :func:`parse_config` returns the resolved config as a plain dict, which
every command saves next to its results.
"""
from __future__ import annotations

import copy
import difflib
import functools
import inspect
import os
import re
import sys
import types
import typing
from dataclasses import InitVar, asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

import yaml
from jsonargparse import ActionConfigFile, ArgumentError, ArgumentParser

from eegfm_bench.errors import EEGFMError

os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")


class ConfigError(EEGFMError, ValueError):
    """A config with an unknown key or an invalid value (the message lists the valid ones and the fix)."""


TRAINER_SKIP = frozenset({"logger", "callbacks", "plugins", "enable_checkpointing", "default_root_dir"})
"""``lightning.Trainer`` arguments a command sets itself (loggers from ``trainer.loggers``, checkpoints, paths)."""

TRAINER_EXTRAS: dict[str, Any] = {"patience": 5, "loggers": ["csv"]}
"""Keys of the ``trainer:`` section that are not ``lightning.Trainer`` arguments (with their defaults)."""

TRAINER_EXTRA_DOCS: dict[str, tuple[str, str]] = {
    "patience": ("int", "early-stopping patience in epochs on the validation balanced accuracy (``val/bacc``); only "
                        "the commands that stop early take it (cv, check, plan)"),
    "loggers": ("str | list[str | dict]", "experiment trackers: ``csv``, ``tensorboard``, ``wandb`` (or ``{name: "
                                          "wandb, project: ...}``); a bare name is a list of one"),
}
"""Type and help of each :data:`TRAINER_EXTRAS` key: what ``--help``, ``--keys`` and the config reference print."""

TRAINER_DEFAULTS: dict[str, Any] = {"max_epochs": 30, "min_epochs": 1, "devices": 1, "accelerator": "auto",
                                    "precision": "32-true", "enable_progress_bar": False,
                                    "enable_model_summary": False, "log_every_n_steps": 1, "deterministic": False}
"""Where the package's defaults differ from Lightning's: one device unless asked (``devices: auto`` would start
DDP over every visible GPU), 30 epochs, no per-epoch progress bar (commands show their own over cells)."""


INTRA_OP_THREADS = 2
"""The default ``intra_op_threads`` of a cell (:func:`eegfm_bench.trainer.fixed_numerics`): a fixed number, so that
a cell computes the same numbers on every machine and under every launcher (not the machine's core count)."""


RENAMED: dict[str, str] = {"device": "trainer.accelerator (and trainer.devices)",
                           "workers": "num_workers (DataLoader processes)"}
"""Keys of earlier versions and where their setting lives now (named in the unknown-key message)."""

SYNONYMS: dict[str, str] = {"learning_rate": "lr", "learningrate": "lr", "epochs": "max_epochs", "n_epochs": "max_epochs",
                            "gpus": "devices", "num_gpus": "devices", "n_folds": "k", "folds_k": "k", "bs": "batch_size",
                            "batchsize": "batch_size", "wd": "weight_decay", "amp": "precision", "logger": "loggers",
                            "head": "heads", "backbone": "model", "workers": "num_workers"}
"""Common names of a setting elsewhere (other frameworks) and this package's key."""


def close_matches(word: str, options: Iterable[str], n: int = 3) -> str:
    """``" Did you mean 'a', 'b'?"`` (empty when nothing is close); a renamed key names its new place."""
    opts = sorted(set(options))
    if str(word) in RENAMED and RENAMED[str(word)].split(" ")[0].split(".")[-1] not in opts:
        return f" `{word}` is now `{RENAMED[str(word)]}`."
    got = difflib.get_close_matches(str(word), opts, n=n, cutoff=0.5)
    syn = SYNONYMS.get(str(word).lower())
    if syn in opts and syn not in got:
        got = [syn] + got[: n - 1]
    return f" Did you mean {', '.join(map(repr, got))}?" if got else ""


def closest_first(word: str, options: Iterable[str]) -> list[str]:
    """``options`` ordered by their likeness to ``word`` (:class:`difflib.SequenceMatcher`'s ratio), the closest
    first; ties in alphabetical order."""
    return sorted(set(options), key=lambda o: (-difflib.SequenceMatcher(None, str(word), o).ratio(), o))


_ROLE = re.compile(r":(?:\w+:)?\w+:`(~?)([^`<]*?)\s*(?:<([^>]*)>)?`")


def plain_text(text: str) -> str:
    """``text`` written for Sphinx (reST roles, double back-quotes) made readable in a terminal, for ``--help`` and
    ``--keys``: ``:func:`~a.b.c``` → ``c``, ``:class:`a.B``` → ``a.B``, a titled role ``:ref:`title <target>``` →
    ``title``, ````x```` → ```x```."""
    def role(m: re.Match) -> str:
        tilde, title, target = m.groups()
        name = title.strip() or (target or "")
        return f"`{name.rsplit('.', 1)[-1] if tilde else name}`"

    return _ROLE.sub(role, text).replace("``", "`")


def plain_help(parser) -> str:
    """``parser.format_help()`` with every help text, section title and description, and the description made plain
    (:func:`plain_text`) *before* argparse wraps them: a role that the wrapping splits over two lines is no longer
    one regular-expression match after it (``:`` at a line's end, ``func:`~a.b``` on the next)."""
    for action in parser._actions:
        if action.help:
            action.help = plain_text(action.help)
    for group in parser._action_groups:
        if group.title:
            group.title = plain_text(group.title)
        if group.description:
            group.description = plain_text(group.description)
    if parser.description:
        parser.description = plain_text(parser.description)
    return parser.format_help()


def add_trainer_arguments(parser, key: str = "trainer", defaults: dict | None = None, training: bool = True) -> None:
    """Add every ``lightning.Trainer.__init__`` argument under ``key`` plus :data:`TRAINER_EXTRAS` (``patience``
    only for commands that train: ``training``)."""
    import lightning as L  # reason: lazy start-up (about 9 s here); configs without a trainer section never need it

    parser.add_method_arguments(L.Trainer, "__init__", key, skip=set(TRAINER_SKIP))
    if training:
        parser.add_argument(f"--{key}.patience", type=int, default=TRAINER_EXTRAS["patience"],
                            help=plain_text(TRAINER_EXTRA_DOCS["patience"][1]) + " (eegfm-bench)")
    parser.add_argument(f"--{key}.loggers", type=Union[str, list[Union[str, dict[str, Any]]]],
                        default=TRAINER_EXTRAS["loggers"],
                        help=plain_text(TRAINER_EXTRA_DOCS["loggers"][1]) + " (eegfm-bench)")
    parser.set_defaults({f"{key}.{k}": v for k, v in {**TRAINER_DEFAULTS, **(defaults or {})}.items()})


def command_parser(prog: str, schema: type | None = None, *, trainer: bool | dict = True, description: str = "",
                   extra: Sequence[type] = (), training: bool = True):
    """A jsonargparse parser for one command.

    Parameters
    ----------
    prog : str
        ``eegfm-bench <command>`` (for ``--help``).
    schema : dataclass type, optional
        Fields become top-level keys (nested dataclasses become sections, e.g. ``data.batch_size``).
    trainer : bool or dict
        Add the ``trainer:`` section (a dict: command-specific trainer defaults, e.g. ``{"max_epochs": 20}``).
    extra : sequence of dataclass types
        More dataclasses whose fields are top-level keys too (e.g. the audit's own settings).
    training : bool
        The command trains (adds ``trainer.patience``).
    """
    p = ArgumentParser(prog=prog, description=description, exit_on_error=False, default_meta=False, allow_abbrev=False,
                       print_config=None)  # eegfm-bench has its own --print-config
    p.add_argument("--config", action=ActionConfigFile, help="YAML config file(s); later ones override earlier")
    if schema is not None:  # a schema's own `trainer` field (the typed record's) is the trainer section below
        skip = ({"trainer"} if trainer and "trainer" in {f.name for f in fields(schema)} else set()) | resolved_names(schema)
        p.add_class_arguments(schema, None, fail_untyped=False, skip=skip or None)
    for cls in extra:
        p.add_class_arguments(cls, None, fail_untyped=False)
    if trainer:
        add_trainer_arguments(p, defaults=trainer if isinstance(trainer, dict) else None, training=training)
    p._eegfm_schema = schema  # for error messages
    p._eegfm_extra = tuple(extra)
    return p


def _sections(schema: type | None, trainer: bool, extra: Sequence[type] = ()) -> dict[str, set[str]]:
    """Valid keys per section (``""`` = top level) for close-match hints."""
    out: dict[str, set[str]] = {"": set()}
    for cls in extra:
        out[""] |= {f.name for f in fields(cls)}

    def walk(cls, prefix):
        for f in fields(cls):
            out.setdefault(prefix, set()).add(f.name)
            t = f.type if not isinstance(f.type, str) else None
            default = f.default_factory() if callable(getattr(f, "default_factory", None)) else f.default
            if is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}." if prefix else f"{f.name}.")
            elif t is not None and is_dataclass(t):
                walk(t, f"{prefix}{f.name}.")
    if schema is not None:
        walk(schema, "")
    if trainer:
        out[""].add("trainer")
        out["trainer."] = set(trainer_argument_names())
    out[""].add("config")
    return out


@functools.lru_cache(maxsize=1)
def trainer_argument_names() -> tuple[str, ...]:
    """Every key the ``trainer:`` section accepts."""
    import lightning as L  # reason: lazy start-up (see add_trainer_arguments)

    names = [n for n in inspect.signature(L.Trainer.__init__).parameters if n not in ("self",) and n not in TRAINER_SKIP]
    return tuple(names) + tuple(TRAINER_EXTRAS)


def _explain(err: Exception, parser, where: str) -> ConfigError:
    """Turn a jsonargparse error into a :class:`ConfigError` with the close matches and a fix line."""
    msg = str(err).strip()
    schema = getattr(parser, "_eegfm_schema", None)
    sections = _sections(schema, trainer=any(a.dest.startswith("trainer.") for a in parser._actions),
                         extra=getattr(parser, "_eegfm_extra", ()))
    m = re.search(r"Group '([\w.]+)' does not accept option '([\w.]+)'", msg)
    if m:
        group, key = m.group(1), m.group(2)
        while "." in key and f"{group}.{key.split('.', 1)[0]}." in sections:  # a nested section's key
            head, key = key.split(".", 1)
            group = f"{group}.{head}"
        valid = sections.get(f"{group}.", set())
        return ConfigError(f"{where}: unknown key {group}.{key}.{close_matches(key, valid)} Valid keys of "
                           f"`{group}`: {', '.join(sorted(valid))}. fix: correct or remove `{group}.{key}`")
    m = re.search(r"Option '([\w.]+)' is not accepted", msg)
    if m:
        key = m.group(1)
        parent = re.search(r'Parser key "([\w.]+)"', msg)
        sec = f"{parent.group(1)}." if parent else ""
        if parent and schema is not None:  # a list of dataclasses (e.g. runs[i]): its item's fields
            item = _item_fields(schema, parent.group(1))
            valid = item or sections.get(sec, set())
        else:
            valid = sections.get(sec, sections[""])
        return ConfigError(f"{where}: unknown key {sec}{key}.{close_matches(key, valid)} Valid keys"
                           f"{' of `' + sec.rstrip('.') + '`' if sec else ''}: {', '.join(sorted(valid))}. fix: correct "
                           f"or remove `{key}`")
    m = re.search(r"unrecognized arguments: --([\w.]+)", msg)
    if m:
        key = m.group(1)
        dests = [a.dest for a in parser._actions if a.dest not in ("help", "config")]
        sec, _, leaf = key.rpartition(".")
        near = [d for d in dests if d.rpartition(".")[0] == sec] or dests
        hint = close_matches(leaf, [d.rpartition(".")[2] for d in near]) if sec else close_matches(key, near)
        return ConfigError(f"command line: unknown option --{key}.{hint} fix: correct it (`--keys` lists every key)")
    m = re.search(r'Parser key "([\w.]+)":\s*Expected a typing\.Literal\[(.*?)\]\.\s*Got value: (\S+)', msg)
    if m:  # a value outside a fixed set (launcher.kind: slurn)
        key, value = m.group(1), m.group(3)
        opts = [o.strip().strip("'\"") for o in m.group(2).split(",")]
        return ConfigError(f"{where}: {key} {value!r} is not one of {', '.join(opts)}.{close_matches(value, opts)} "
                           f"fix: {key}: {' / '.join(closest_first(value, opts))}")
    msg = re.sub(r"\s+", " ", msg)
    return ConfigError(f"{where}: {msg}")


def _item_fields(schema: type, key: str) -> set[str]:
    for f in fields(schema):
        if f.name == key:
            args = typing.get_args(f.type) if not isinstance(f.type, str) else ()
            for a in args:
                if is_dataclass(a):
                    return {g.name for g in fields(a)}
            hints = typing.get_type_hints(schema)
            for a in typing.get_args(hints.get(key)):
                if is_dataclass(a):
                    return {g.name for g in fields(a)}
    return set()


YAML_BOOLEANS = {"on": True, "yes": True, "true": True, "off": False, "no": False, "false": False}
"""The words YAML reads as a boolean (``confound: off``; any case)."""


def _yaml_booleans(schema: type | None, raw: dict) -> dict:
    """``raw`` (a mapping given from Python) with a :data:`YAML_BOOLEANS` word given to a section that may be a
    boolean turned into that boolean, as YAML reads it from a file: ``{"confound": "off"}`` is ``confound: off``."""
    if schema is None:
        return raw
    words = {k for k, v in raw.items() if isinstance(v, str) and v.lower() in YAML_BOOLEANS}
    if not words:
        return raw
    hints = typing.get_type_hints(schema)
    return {k: YAML_BOOLEANS[v.lower()] if k in words and bool in typing.get_args(hints.get(k)) else v
            for k, v in raw.items()}


def _check_mappings(schema: type | None, raw: dict, where: str, trainer: bool = True, extra: Sequence[type] = ()) -> None:
    """Top-level keys must exist (jsonargparse lets an unknown key with an empty mapping through), and sections whose
    schema is a mapping must be given as one (``data: [1]`` is refused with the fix)."""
    if schema is None:
        return
    valid = _sections(schema, trainer, extra)[""]
    for k in raw:
        if k not in valid:
            raise ConfigError(f"{where}: unknown key {k}.{close_matches(k, valid)} Valid keys: "
                              f"{', '.join(sorted(valid))}. fix: correct or remove `{k}`")
    for f in fields(schema):
        default = f.default_factory() if callable(getattr(f, "default_factory", None)) else f.default
        takes_bool = bool in getattr(f.type, "__args__", ()) or "bool" in str(f.type)  # e.g. `confound: off`
        if f.name in raw and is_dataclass(default) and raw[f.name] is not None and not isinstance(raw[f.name], dict) \
                and not (takes_bool and isinstance(raw[f.name], bool)):
            valid = ", ".join(g.name for g in fields(default))
            raise ConfigError(f"{where}: `{f.name}` must be a mapping of `key: value` lines, got a "
                              f"{type(raw[f.name]).__name__}; fix: e.g. `{f.name}: {{{fields(default)[0].name}: ...}}` "
                              f"(valid keys: {valid})")
    if "trainer" in raw and raw["trainer"] is not None and not isinstance(raw["trainer"], dict):
        raise ConfigError(f"{where}: `trainer` must be a mapping, got a {type(raw['trainer']).__name__}; fix: e.g. "
                          "`trainer: {max_epochs: 10}`")


def read_yaml(path: str | os.PathLike) -> dict:
    """A YAML config file as a dict.

    Raises
    ------
    ConfigError
        If the file is missing, or does not hold a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} not found; fix: give the path of a YAML file (see configs/experiment/)")
    raw = yaml.safe_load(p.read_text())
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"the config {p} must be a mapping of `key: value` lines, got a {type(raw).__name__}")
    return raw


def parse_config(parser, source: str | os.PathLike | dict | None = None, args: Sequence[str] = (),
                 *, where: str | None = None) -> dict:
    """Parse and validate one command's config.

    Parameters
    ----------
    parser
        From :func:`command_parser`.
    source : path, dict or None
        A YAML file or an already-read mapping (Python API, tests).
    args : sequence of str
        Command-line arguments: more ``--config`` files and dotted overrides (``--trainer.devices 2``).
    where : str, optional
        What to call the config in messages (default: the file name).

    Returns
    -------
    dict
        The resolved config (defaults filled, types checked), without the ``config`` key.

    Raises
    ------
    ConfigError
        Unknown keys (with close matches), wrong types, a section that is not a mapping.
    """
    schema = getattr(parser, "_eegfm_schema", None)
    trainer = any(a.dest.startswith("trainer.") for a in parser._actions)
    where = where or (str(source) if isinstance(source, (str, os.PathLike)) else parser.prog)
    try:
        if isinstance(source, dict):
            source = _yaml_booleans(schema, source)
            _check_mappings(schema, source, where, trainer, getattr(parser, "_eegfm_extra", ()))
            ns = parser.parse_object(copy.deepcopy(source))
            if args:
                ns = parser.parse_args(list(args), namespace=ns)
        else:
            argv = (["--config", str(source)] if source is not None else []) + list(args)
            for i, a in enumerate(argv):
                if a == "--config" and i + 1 < len(argv):
                    _check_mappings(schema, read_yaml(argv[i + 1]), argv[i + 1], trainer,
                                    getattr(parser, "_eegfm_extra", ()))
            ns = parser.parse_args(argv)
    except ArgumentError as err:
        raise _explain(err, parser, where) from None
    out = ns.as_dict()
    out.pop("config", None)
    out.pop("__path__", None)
    if isinstance(out.get("trainer"), dict):
        out["trainer"] = normalise_trainer(out["trainer"])
    return out


def normalise_trainer(tr: dict) -> dict:
    """``devices: "2"`` (a command-line string) → ``2``; ``loggers: wandb`` → ``[wandb]``."""
    tr = dict(tr)
    if isinstance(tr.get("devices"), str) and tr["devices"].strip().isdigit():
        tr["devices"] = int(tr["devices"])
    if isinstance(tr.get("loggers"), str):
        tr["loggers"] = [s.strip() for s in tr["loggers"].strip("[]").split(",") if s.strip()]
    return tr


@functools.lru_cache(maxsize=1)
def _trainer_only_parser():
    p = ArgumentParser(prog="trainer", exit_on_error=False, default_meta=False)
    add_trainer_arguments(p)
    return p


def check_trainer_section(values: dict | None, where: str) -> dict:
    """Validate a partial ``trainer:`` mapping (e.g. one run's overrides) and return it typed.

    Raises
    ------
    ConfigError
        An unknown key (with close matches) or a value of the wrong type.
    """
    if not values:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping, got a {type(values).__name__}; fix: e.g. `{{max_epochs: 10}}`")
    unknown = [k for k in values if k not in trainer_argument_names()]
    if unknown:
        k = unknown[0]
        raise ConfigError(f"unknown key {where}.{k}.{close_matches(k, trainer_argument_names())} The trainer section "
                          "accepts every lightning.Trainer argument plus patience and loggers; fix: correct or "
                          f"remove `{k}`")
    try:
        ns = _trainer_only_parser().parse_object({"trainer": copy.deepcopy(values)})
    except ArgumentError as err:
        raise ConfigError(f"{where}: {' '.join(str(err).split())}") from None
    full = normalise_trainer(ns.as_dict()["trainer"])
    return {k: full[k] for k in values}


def check_section(values: dict | None, schema: type, where: str) -> dict:
    """Validate a partial mapping against a dataclass's fields (e.g. one run's ``optim`` overrides).

    Raises
    ------
    ConfigError
        An unknown key (with close matches).
    """
    if not values:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping, got a {type(values).__name__}")
    valid = [f.name for f in fields(schema)]
    for k in values:
        if k not in valid:
            raise ConfigError(f"unknown key {where}.{k}.{close_matches(k, valid)} Valid keys: {', '.join(valid)}; "
                              f"fix: correct or remove `{k}`")
    return dict(values)


def merge_config(base: dict, over: dict | None, where: str = "", error: type[ValueError] = ConfigError) -> dict:
    """Deep-merge ``over`` into a copy of the defaults ``base`` (unknown keys refused, with close matches).

    Used for the free-form sub-mappings that are not part of a typed schema (e.g. one run's ``trainer`` overrides
    merged over the config's ``trainer`` section).

    Raises
    ------
    error
        If ``over`` is not a mapping, or holds a key that ``base`` lacks; the message lists the valid keys.
    """
    if over is not None and not isinstance(over, dict):
        what = "the config" if not where else f"`{where.rstrip('.')}`"
        raise error(f"{what} must be a mapping of `key: value` lines, got a {type(over).__name__}; fix: e.g. "
                    f"`{next(iter(base), 'key')}: ...` (valid keys: {', '.join(sorted(base))})")
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise error(f"unknown key {where}{k!r}.{close_matches(k, base)} Valid keys: {', '.join(sorted(base))}")
        out[k] = (merge_config(base[k], v, f"{where}{k}.", error)
                  if isinstance(base[k], dict) and v is not None else v)
    return out


# ------------------------------------------------------------------------------------------ typed configs
def resolved_names(schema: type) -> set[str]:
    """The names of a schema's init-only fields (``dataclasses.InitVar``): what the command's loader resolves once
    and the typed record carries (``CVConfig.resolved_task``: the task's
    :class:`~eegfm_bench.data.ingest.DeclaredTask`). None of them is a key of the config: no option, not in
    :meth:`ConfigRecord.to_dict` (so neither saved nor hashed), not compared; ``dataclasses.replace`` keeps them."""
    return {k for k, t in typing.get_type_hints(schema).items() if isinstance(t, InitVar)}


@dataclass(frozen=True)
class ConfigRecord:
    """Base of the frozen config dataclasses (one per section: ``data``, ``split``, ``runs[i]``, ...).

    Commands receive their config as these objects and read attributes (``cfg.data.batch_size``); :func:`typed`
    builds them from the validated mapping :func:`parse_config` returns. :meth:`to_dict` gives the mapping back
    (what is saved as ``config.yaml`` and what config hashes are computed from).

    There is no access by key (``cfg["data"]`` raises ``TypeError``): a config is read by attribute from the
    command line down to the function that uses a setting, so a misspelt setting fails where it is written, and
    a type checker sees it. Assigning raises ``FrozenInstanceError``; a changed copy is ``dataclasses.replace``.
    """

    def to_dict(self) -> dict:
        """The config as nested plain dicts and lists (a copy)."""
        return asdict(self)


def typed(schema: type, values: Any, where: str = "") -> Any:
    """The validated mapping ``values`` of ``schema`` (a dataclass, usually a frozen :class:`ConfigRecord`) as an
    instance, nested sections included: a field typed as a dataclass, ``Optional`` of one, ``Union`` of one and
    ``bool`` (``confound: off``), ``list`` of one or ``dict`` of them by name is built recursively; free-form mappings (``trainer``,
    ``backbone_kwargs``, ...) stay dicts. Keys the schema lacks are refused (they were refused by the parser).

    ``where`` is the section's key path in messages (``launcher`` for a ``launcher:`` mapping; its nested sections
    follow: ``launcher.slurm``); default: the schema's name.

    Raises
    ------
    ConfigError
        A key that is not a field of ``schema`` (a mapping not parsed first, e.g. ``ingest --task``'s
        ``--launcher.<key>`` pairs): one line naming its key path, the closest field and every field, closest first.
    """
    if is_dataclass(values) and isinstance(values, schema):
        return values
    hints = typing.get_type_hints(schema)
    names = {f.name for f in fields(schema)}
    extra = sorted(set(values) - names)
    where = where or schema.__name__
    if extra:
        key = f"{where}.{extra[0]}"
        raise ConfigError(f"unknown key {key}.{close_matches(extra[0], names)} fix: one of "
                          f"{', '.join(closest_first(extra[0], names))} (the keys of {where}, closest first)")
    return schema(**{k: _typed_value(hints[k], v, f"{where}.{k}") for k, v in values.items()})


def _typed_value(tp: Any, v: Any, where: str = "") -> Any:
    if v is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_dataclass(tp) and isinstance(v, dict):
        return typed(tp, v, where)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        for a in args:
            if is_dataclass(a) and isinstance(v, dict):
                return typed(a, v, where)
            if typing.get_origin(a) is list and isinstance(v, list):
                return _typed_value(a, v, where)
        return v
    if origin is list and args and isinstance(v, list):
        return [_typed_value(args[0], x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict and len(args) == 2 and is_dataclass(args[1]) and isinstance(v, dict):
        return {k: _typed_value(args[1], x, f"{where}.{k}") for k, x in v.items()}  # e.g. a paper's datasets by name
    return v


def load_typed(parser, schema: type, source, args: Sequence[str] = (), *, prepare=None,
               where: str | None = None) -> Any:
    """The one loader of every command's config: a YAML path, a mapping or an instance of ``schema`` (a worker's
    copy, parsed and checked again) plus dotted overrides, through the command's ``parser``
    (:func:`command_parser`: defaults filled, unknown keys refused with close matches), then ``prepare(raw)`` (the
    normalisations a command makes on the mapping, e.g. a task path resolved next to its config), then
    :func:`typed` (``schema``, frozen). Each command's loader adds its own checks on the typed object
    (``eegfm_bench.runs.cv.cells.load_config``, ``load_sweep_config``, ``load_interpret_config``, ...).

    Raises
    ------
    ConfigError
        Unknown keys, wrong types (each naming the fix).
    """
    if is_dataclass(source) and isinstance(source, schema):
        source = source.to_dict()
    raw = parse_config(parser, source, args, where=where)
    if prepare is not None:
        raw = prepare(raw)
    return typed(schema, raw)


def read_saved(parser, path: str | os.PathLike, schema: type) -> Any:
    """A config a command saved beside its results (``config.yaml``, ``sweep.yaml``, ...), read back through that
    command's ``parser`` (:func:`command_parser`) and typed as ``schema``: defaults filled, none of the command's
    checks on data or models.

    Raises
    ------
    ConfigError
        One line: the file, what does not read (e.g. a key an older version wrote) and the fix.
    """
    try:
        return load_typed(parser, schema, path)
    except ConfigError as err:
        msg = re.sub(r"\s+", " ", str(err)).removeprefix(f"{path}: ")
        raise ConfigError(f"{path} does not read as a {schema.__name__} of this version of eegfm-bench ({msg}); fix: "
                          f"edit it to this version's keys (`{parser.prog} --keys` lists them), or rerun "
                          f"`{parser.prog}` with a config of this version to write it again") from None
