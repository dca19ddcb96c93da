"""Config helpers shared by every command (cv, controls, interpret): defaults merged with user YAML, unknown keys refused."""
from __future__ import annotations

import copy


class ConfigError(ValueError):
    """A config with an unknown key or an invalid value (the message lists the valid ones)."""


def merge_config(base: dict, over: dict | None, where: str = "", error: type[ValueError] = ConfigError) -> dict:
    """Deep-merge ``over`` into a copy of the defaults ``base``.

    Parameters
    ----------
    base : dict
        Defaults; nested dicts are merged recursively.
    over : dict or None
        User values. ``None`` for a section whose default is a mapping keeps that section's defaults.
    where : str
        Key prefix for messages (e.g. ``"runs[0].optim."``).
    error : exception class
        Raised for unknown keys (commands keep their own ``ConfigError`` subclass).

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
            raise error(f"unknown key {where}{k!r}; valid keys: {', '.join(sorted(base))}")
        out[k] = (merge_config(base[k], v, f"{where}{k}.", error)
                  if isinstance(base[k], dict) and v is not None else v)
    return out


def resolve_device(name: str, error: type[ValueError] = ConfigError) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is visible, else ``"cpu"``; any other value is checked by torch.

    Raises
    ------
    error
        If torch does not accept the device string (e.g. ``"gpu"``), or CUDA is asked for and not available.
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise error(f"device: {name!r} is not a torch device ({e}); fix: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise error(f"device: {name!r} but no CUDA device is visible; fix: device: auto or cpu")
    return name
