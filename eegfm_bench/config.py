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
        User values.
    where : str
        Key prefix for messages (e.g. ``"runs[0].optim."``).
    error : exception class
        Raised for unknown keys (commands keep their own ``ConfigError`` subclass).

    Raises
    ------
    error
        If ``over`` holds a key that ``base`` lacks; the message lists the valid keys.
    """
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise error(f"unknown key {where}{k!r}; valid keys: {', '.join(sorted(base))}")
        out[k] = (merge_config(base[k], v, f"{where}{k}.", error)
                  if isinstance(base[k], dict) and isinstance(v, dict) else v)
    return out
