"""Name → factory registries (timm-style) for tasks, backbones, heads and perturbations.

An unknown name raises :class:`UnknownNameError` listing the valid names and the closest matches,
so a config typo is caught before any data is read.
"""
from __future__ import annotations

import difflib
from importlib.metadata import entry_points
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a registry is asked for a name it does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; print it plainly
        return str(self.args[0])


class Registry(Generic[T]):
    """A named collection of factories.

    Parameters
    ----------
    kind : str
        What the registry holds ("task", "backbone", "head", ...), used in error messages.
    entry_points : str or None
        Entry point group whose members are registered (name: the entry point's name, value: the loaded object)
        when a name is missing, so that an installed package extends the registry in every process.
    """

    def __init__(self, kind: str, entry_points: str | None = None):
        self.kind = kind
        self.group = entry_points
        self._items: dict[str, T] = {}
        self._loaded: set[str] = set()  # entry points already loaded (their ``module:attr`` values)

    def _load_entry_points(self) -> None:
        """Register the group's entry points not loaded yet.

        Raises
        ------
        ValueError
            An entry point whose name is already registered to another object (a plug-in shadowing a built-in or
            another plug-in's name); the message names both and the fix. A plug-in module that registers itself
            with :meth:`register` under its entry point's name is the same object, not a collision.
        """
        if self.group is None:
            return
        for ep in entry_points(group=self.group):
            if ep.value in self._loaded:
                continue
            obj = ep.load()  # importing a module that registers itself puts obj under its name first
            have = self._items.setdefault(ep.name, obj)
            if have is not obj:
                raise ValueError(f"{self.kind} {ep.name!r} of the installed entry point {ep.value!r} (group "
                                 f"{self.group}) is already registered as {have!r}; fix: rename the entry point in "
                                 "its package's pyproject.toml (taken: " + ", ".join(sorted(self._items)) + ")")
            self._loaded.add(ep.value)

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name`` (default: ``obj.__name__``).

        Raises
        ------
        ValueError
            If the name is already registered.
        """

        def deco(obj: T) -> T:
            key = name or getattr(obj, "name", None) or obj.__name__  # type: ignore[attr-defined]
            if key in self._items:
                raise ValueError(f"{self.kind} {key!r} is registered twice; fix: give the new one another name (taken: "
                                 f"{sorted(self._items)})")
            self._items[key] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        """Return the factory registered as ``name``.

        Raises
        ------
        UnknownNameError
            If ``name`` is not registered; the message lists valid names and close matches.
        """
        if name not in self._items:
            self._load_entry_points()
        if name not in self._items:
            close = difflib.get_close_matches(name, list(self._items), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}.{hint} Valid {self.kind}s: {', '.join(sorted(self._items))}.\n"
                f"fix: set the {self.kind} name in your config to one of these."
            )
        return self._items[name]

    def names(self) -> list[str]:
        """Sorted list of registered names (entry points of the group included)."""
        self._load_entry_points()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
