"""Bring your own model: any PyTorch encoder by import path, declared in the config.

A cv config's ``user_models:`` section names encoders that live outside this package::

    user_models:
      tiny_tf:
        class_path: my_pkg.encoders.TinyTransformer   # any nn.Module (the jsonargparse / LightningCLI convention)
        init_args: {d_model: 32, depth: 2}
        tokens: output            # output | module:<submodule path> (its output, by a hook) | method:<name>
        blocks: "layers.*"        # fnmatch pattern over named_modules(): the blocks probes and attention hook
        channels: {kind: any, variable: false}     # any | names (+ names: [...]) | positions
        sfreq: 128.0              # Hz the encoder expects
        window_s: 4.0             # s per window
        unit: µV                  # input unit: scale 1e6 (V -> µV) unless `scale` says otherwise
        l_freq: 0.5               # band-pass of its preprocessing (Hz; null: none)
        h_freq: 40.0
        reference: average        # average | none
        lora_targets: [linear1, linear2]   # module-name suffixes (peft's list semantics)
        pretrained: {path: /data/tiny_tf.safetensors, sha256: 3f2a...}   # optional; strict loading
    runs:
      - {model: tiny_tf, regime: head_only, heads: [mean, flatten]}

:func:`register_user_models` turns each declaration into a :class:`~eegfm_bench.models.base.BackboneAdapter`
subclass registered under its name, so every command that takes a registered backbone (cv, sweep, probe,
attribute) takes it too, and a fold checkpoint carries the declaration (``FMClassifier`` hyper-parameter
``user_model``) so that it loads in another process. :func:`check_user_model` runs one batch through it before
any data is read — tokens shape, block pattern, gradient flow, LoRA targets, the declared channel contract — and
raises :class:`UserModelError` naming what is wrong and the fix.

The encoder's constructor receives the signal arguments it declares by name (``n_chans``, ``n_times``,
``sfreq``, ``ch_names``, ``n_outputs``) unless ``init_args`` sets them. Its tokens must be ``(batch, n_tokens,
d_model)``; a forward (or method) that takes ``ch_names`` receives the input's channel names (variable-channel
models).
"""
from __future__ import annotations

import difflib
import fnmatch
import hashlib
import importlib
import inspect
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping

import torch
from safetensors.torch import load_file
from torch import nn

from eegfm_bench.config import ConfigError, ConfigRecord, typed
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.adaptation import LoraTargetError, apply_lora, resolve_targets
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.backbones import common
from eegfm_bench.models.backbones.common import NamedChannelContract, gather
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.config.user_model import UserChannels, UserPretrained, UserLRP, UserModelConfig

SIGNAL_ARGS = ("n_chans", "n_times", "sfreq", "ch_names", "n_outputs")
DRY_RUN_CHANNELS = ["Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8", "P7", "P3", "Pz", "P4",
                    "P8", "O1", "O2"]
"""The montage of the dry run when the declaration names no channels (the 19 channels of the 10-20 system)."""


class UserModelError(ConfigError):
    """A user model's declaration does not match the module it names."""


NOT_HASHED = ("lrp", "pretraining_corpora", "token_layout", "cls_tokens")
"""Declaration keys that cannot change a trained cell's numbers (left out of cell hashes)."""
LRP_ATTENTION_MARK = "_eegfm_lrp_sdpa_attention"
"""Instance attribute set on a user model's declared attention modules (read by the AttnLRP patch map)."""

_UNIT_SCALE = {"µV": 1e6, "uV": 1e6, "mV": 1e3, "V": 1.0}
_REGISTERED: dict[str, UserModelConfig] = {}


def import_object(path: str, what: str = "class_path"):
    """The object at dotted ``path`` (``package.module.Name``).

    Raises
    ------
    UserModelError
        When ``path`` has no module part, its module does not import or lacks the name (``what`` names the field)."""
    mod, _, name = str(path).rpartition(".")
    if not mod:
        raise UserModelError(f"{what} {path!r} is not an import path; fix: package.module.Class")
    try:
        return getattr(importlib.import_module(mod), name)
    except ModuleNotFoundError as err:
        raise UserModelError(f"{what} {path!r}: module {mod!r} not importable ({err}); fix: install the package "
                             "or put its folder on PYTHONPATH") from None
    except AttributeError:
        near = difflib.get_close_matches(name, dir(importlib.import_module(mod)), n=1)
        raise UserModelError(f"{what} {path!r}: {mod!r} has no {name!r}"
                             + (f"; did you mean {mod}.{near[0]}" if near else "")) from None


def _written(spec: Mapping | UserModelConfig) -> dict:
    """A declaration as a plain mapping: a typed one via ``to_dict()``, a written one copied (its nested typed
    sections, if any, as plain mappings too)."""
    if isinstance(spec, ConfigRecord):
        return spec.to_dict()
    return {k: v.to_dict() if isinstance(v, ConfigRecord) else v for k, v in dict(spec).items()}


def user_model_config(spec: Mapping | UserModelConfig, name: str | None = None) -> UserModelConfig:
    """A declaration (a mapping as written in a config or saved in a checkpoint, or already a
    :class:`UserModelConfig`) checked and typed: defaults filled, unknown keys refused with the close match, numbers
    and enumerations checked. ``name`` only names the model in the errors.

    Raises
    ------
    UserModelError
        An unknown key (in the declaration or its ``channels`` / ``pretrained`` / ``lrp`` section), a value out of
        range; the message names the fix.
    """
    who = f"user model {name}" if name else "user model"
    spec = _written(spec)
    keys = {f.name for f in fields(UserModelConfig)}
    unknown = sorted(set(spec) - keys)
    if unknown:
        hint = {k: difflib.get_close_matches(k, sorted(keys), n=1) for k in unknown}
        raise UserModelError(f"{who}: unknown key(s) {unknown}"
                             + "".join(f"; did you mean {v[0]!r} for {k!r}" for k, v in hint.items() if v)
                             + f"; valid: {sorted(keys)}")
    for key, section in (("channels", UserChannels), ("pretrained", UserPretrained), ("lrp", UserLRP)):
        sub = spec.get(key)
        if sub is not None and not isinstance(sub, Mapping):
            raise UserModelError(f"{who}: {key} must be a mapping, got {sub!r}")
        allowed = {f.name for f in fields(section)}
        bad = sorted(set(sub or {}) - allowed)
        if bad:
            hint = [f"did you mean {difflib.get_close_matches(b, allowed, n=1)[0]!r} for {b!r}" for b in bad
                    if difflib.get_close_matches(b, allowed, n=1)]
            raise UserModelError(f"{who}: unknown key(s) {bad} in {key}" + (f"; {'; '.join(hint)}" if hint else "")
                                 + f"; valid: {sorted(allowed)}")
        if section is UserPretrained and sub is not None and not sub.get("path"):
            raise UserModelError(f"{who}: pretrained needs a path; fix: pretrained: {{path: FILE, sha256: HEX}}")
    sections = {k: spec.get(k) or {} for k in ("channels", "lrp")}  # null: the defaults
    cfg = typed(UserModelConfig, {"class_path": "", **spec, **sections})
    _check_values(cfg, who)
    return cfg


def _check_values(cfg: UserModelConfig, who: str) -> None:
    """The declaration's numbers and enumerations (``who`` names the model in the errors)."""
    for f in fields(UserLRP):
        v = getattr(cfg.lrp, f.name)
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise UserModelError(f"{who}: lrp.{f.name} must be a list of strings, got {v!r}")
    for k, positive in (("sfreq", True), ("window_s", True), ("l_freq", False), ("h_freq", False), ("scale", True)):
        v = getattr(cfg, k)
        if v is None and k in ("l_freq", "h_freq", "scale"):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (positive and v <= 0) or v < 0:
            raise UserModelError(f"{who}: {k} = {v!r}; fix: a number{' > 0' if positive else ' >= 0'} "
                                 f"({'Hz' if 'freq' in k else 's' if k == 'window_s' else 'volts to the input unit'})"
                                 + (" or null" if k in ("l_freq", "h_freq", "scale") else ""))
    if cfg.token_layout not in (None, "channel_major", "patch_major"):
        raise UserModelError(f"{who}: token_layout {cfg.token_layout!r}; fix: channel_major, patch_major or null")
    if not isinstance(cfg.cls_tokens, int) or cfg.cls_tokens < 0:
        raise UserModelError(f"{who}: cls_tokens {cfg.cls_tokens!r}; fix: a whole number >= 0")
    pc = cfg.pretraining_corpora
    if pc is not None and (not isinstance(pc, (list, tuple)) or not all(isinstance(x, str) for x in pc)):
        raise UserModelError(f"{who}: pretraining_corpora must be a list of dataset names, got {pc!r}")
    if cfg.channels.kind not in ("any", "names", "positions"):
        raise UserModelError(f"{who}: channels.kind {cfg.channels.kind!r}; fix: any, names or positions")


def _match(model: nn.Module, pattern: str) -> list[tuple[str, nn.Module]]:
    """Submodules whose dotted name matches ``pattern`` segment by segment (``*`` does not cross a dot:
    ``layers.*`` matches ``layers.0`` but not ``layers.0.linear1``)."""
    pat = pattern.split(".")
    return [(n, m) for n, m in model.named_modules()
            if n and len(n.split(".")) == len(pat) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(n.split("."), pat))]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_user_weights(module: nn.Module, pre: UserPretrained | Mapping) -> str:
    """Load the weights file ``pre.path`` into ``module`` (strict), after checking its sha256; return the init
    label.

    Raises
    ------
    UserModelError
        A missing file, a sha256 that differs from the declared one, or keys that do not match the module.
    """
    if not isinstance(pre, UserPretrained):
        pre = typed(UserPretrained, dict(pre))
    path = Path(pre.path).expanduser()
    if not path.is_file():
        raise UserModelError(f"pretrained weights {path} not found; fix: the path of a .safetensors / .pt state dict")
    sha = _sha256(path)
    if pre.sha256 and sha != pre.sha256:
        raise UserModelError(f"pretrained weights {path}: sha256 {sha} differs from the declared {pre.sha256}; "
                             "fix: the right file, or update the declared sha256")
    if path.suffix == ".safetensors":
        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        detail = "; ".join(x.strip() for x in str(err).splitlines() if x.strip())
        raise UserModelError(f"pretrained weights {path} do not match the module ({detail[:600]}); fix: weights of "
                             "this architecture and init_args (a channel-count-dependent module needs channels: "
                             "{kind: names, names: [...]} of the montage its weights were trained on)") from None
    return f"pretrained:{path.stem}@{sha[:12]}"


def make_user_adapter(name: str, spec: UserModelConfig | Mapping) -> type[BackboneAdapter]:
    """A :class:`BackboneAdapter` subclass for one declaration (see the module docstring).

    The declaration's preprocessing, channel contract and token source are checked and resolved here; the class is a
    :class:`_UserBackbone` carrying them as class attributes (it builds the encoder when instantiated).

    Raises
    ------
    UserModelError
        A unit without a default scale, ``channels.kind: names`` without names, or an unknown ``tokens`` source.
    """
    um = user_model_config(spec, name)
    prep = _user_preprocessing(name, um)
    contract, declared = _user_contract(name, um)
    tokens_src = _tokens_source(name, um)
    cls_name = f"UserBackbone_{name}"
    return type(cls_name, (_UserBackbone,), {
        "__doc__": f"User model {name!r}: {um.class_path} (declared in the config; :mod:`eegfm_bench.models.user`).",
        "__module__": __name__, "__qualname__": cls_name, "name": name,
        "is_foundation_model": bool(um.foundation_model), "preprocessing": prep,
        "lora_targets": list(um.lora_targets), "user_spec": um, "declared_contract": contract,
        "declared_channels": declared, "tokens_source": tokens_src})


def _user_preprocessing(name: str, um: UserModelConfig) -> Preprocessing:
    """The declaration's preprocessing (its ``scale`` defaults from its ``unit``)."""
    scale = um.scale if um.scale is not None else _UNIT_SCALE.get(um.unit)
    if scale is None:
        raise UserModelError(f"user model {name}: unit {um.unit!r} has no default scale; fix: set `scale` "
                             "(the multiplier from volts to the encoder's input unit)")
    return Preprocessing(sfreq=float(um.sfreq), l_freq=um.l_freq, h_freq=um.h_freq, scale=float(scale),
                         unit=um.unit, window_s=float(um.window_s), reference=um.reference,
                         source=f"declared in the config for user model {name} ({um.class_path})")


def _window_samples(um: UserModelConfig) -> int:
    """Samples per window of a declaration (``sfreq × window_s``, rounded)."""
    return int(round(um.sfreq * um.window_s))


def _user_contract(name: str, um: UserModelConfig) -> tuple[ChannelContract, list[str] | None]:
    """The declaration's channel contract and, for ``channels.kind: names``, the declared channels (else None):
    exactly these channels, selected and put in this order by name; a missing one is named."""
    chans, n_times, sfreq = um.channels, _window_samples(um), float(um.sfreq)
    contract = ChannelContract(kind=chans.kind, sfreq=sfreq, names=tuple(chans.names), variable=bool(chans.variable),
                               n_times=n_times)
    declared = list(chans.names) if chans.kind == "names" else None
    if declared is not None:
        if not declared:
            raise UserModelError(f"user model {name}: channels.kind names but no channels.names; fix: list the "
                                 "channels the encoder reads, in its order")
        contract = NamedChannelContract(kind="selection", sfreq=sfreq, names=tuple(declared),
                                        variable=bool(chans.variable), n_times=n_times)
    if chans.kind == "positions":
        contract = NamedChannelContract(kind="positions", sfreq=sfreq, variable=bool(chans.variable),
                                        n_times=n_times)
    return contract, declared


def _tokens_source(name: str, um: UserModelConfig) -> str:
    """The declared token source: ``output``, ``module:<submodule path>`` or ``method:<name>``."""
    tokens_src = str(um.tokens)
    if not (tokens_src == "output" or tokens_src.startswith(("module:", "method:"))):
        raise UserModelError(f"user model {name}: tokens {tokens_src!r}; fix: output, module:<submodule path> or "
                             "method:<name>")
    return tokens_src


class _UserBackbone(BackboneAdapter):
    """The adapter of a user model; :func:`make_user_adapter` makes one subclass per declaration, whose class
    attributes (``name``, ``user_spec``, ``declared_contract``, ``declared_channels``, ``tokens_source``, the
    preprocessing) say what to build."""

    user_spec: ClassVar[UserModelConfig]
    declared_contract: ClassVar[ChannelContract]
    declared_channels: ClassVar[list[str] | None]
    tokens_source: ClassVar[str]

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, *, declared_weights: bool = True,
                 **kwargs: Any):
        """``declared_weights=False`` builds a random initialisation even when weights are declared (the
        matched random-init arms of the negative controls)."""
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        um = self.user_spec
        self.model = self._build_module(kwargs)
        self.init_label = load_user_weights(self.model, um.pretrained) if um.pretrained and declared_weights else None
        self._mark_lrp_attention()
        self._call, self._hooked = self._token_call()
        self._takes_ch = "ch_names" in inspect.signature(self._call).parameters
        self._block_list = [m for _, m in _match(self.model, um.blocks)] if um.blocks else []
        self._n_tokens, self._d_model = self._token_shape()

    def _build_module(self, kwargs: dict) -> nn.Module:
        """The declared class built with its ``init_args``, the call's kwargs and the signal arguments its
        constructor takes (``n_chans``, ``n_times``, ``sfreq``, ``ch_names``, ``n_outputs``)."""
        name, um = self.name, self.user_spec
        cls = import_object(um.class_path)
        args = {**um.init_args, **kwargs}
        params = inspect.signature(cls).parameters
        inputs = self.declared_channels if self.declared_channels is not None else list(self.ch_names)
        signal = {"n_chans": len(inputs), "n_times": self.n_times, "sfreq": float(um.sfreq),
                  "ch_names": list(inputs), "n_outputs": self.n_outputs}
        for k, v in signal.items():
            if k in params and k not in args:
                args[k] = v
        try:
            model = cls(**args)
        except TypeError as err:
            raise UserModelError(f"user model {name}: {um.class_path}({', '.join(args)}) failed: {err}; "
                                 "fix: init_args must match its constructor") from None
        if not isinstance(model, nn.Module):
            raise UserModelError(f"user model {name}: {um.class_path} is not a torch.nn.Module")
        return model

    def _mark_lrp_attention(self) -> None:
        """Mark the modules ``lrp.attention`` names (AttnLRP's rule for them); a pattern matching none is an error."""
        for pat in self.user_spec.lrp.attention:
            found = _match(self.model, pat)
            if not found:
                raise UserModelError(f"user model {self.name}: lrp.attention pattern {pat!r} matches no module; fix: "
                                     f"one of {[n for n, _ in self.model.named_modules() if n][:25]}")
            for path, m in found:
                setattr(m, LRP_ATTENTION_MARK, path or "<root>")  # truthy: its path, for messages

    def _token_call(self):
        """``(call, hooked)``: what to call on the input (the module or the declared method) and the submodule whose
        output is the tokens (``module:<path>``; None when the call's own output is)."""
        name, tokens_src, cls_path = self.name, self.tokens_source, self.user_spec.class_path
        call = self.model
        if tokens_src.startswith("method:"):
            meth = tokens_src.split(":", 1)[1]
            if not callable(getattr(self.model, meth, None)):
                raise UserModelError(f"user model {name}: tokens {tokens_src!r} but {cls_path} has no "
                                     f"method {meth!r}; fix: name one of its methods, or tokens: output")
            call = getattr(self.model, meth)
        hooked = None
        if tokens_src.startswith("module:"):
            path = tokens_src.split(":", 1)[1]
            mods = dict(self.model.named_modules())
            if path not in mods:
                raise UserModelError(f"user model {name}: tokens {tokens_src!r} names no submodule; fix: one of "
                                     f"{[n for n in mods if n][:20]}")
            hooked = mods[path]
        return call, hooked

    def _token_shape(self) -> tuple[int, int]:
        """``(n_tokens, d_model)`` from one zero batch through the encoder in eval mode (its mode restored)."""
        with torch.no_grad():
            was = self.model.training
            self.model.eval()
            t = self._tokens(torch.zeros(2, len(self.ch_names), self.n_times), self.ch_names)
            self.model.train(was)
        return int(t.shape[1]), int(t.shape[2])

    @property
    def channel_contract(self) -> ChannelContract:
        return self.declared_contract

    @property
    def d_model(self) -> int:
        return self._d_model

    def n_tokens(self, n_chans: int | None = None) -> int:
        return self._n_tokens

    def _tokens(self, x: torch.Tensor, ch_names) -> torch.Tensor:
        name, declared, tokens_src = self.name, self.declared_channels, self.tokens_source
        if declared is not None:  # kind names: the declared channels, in the declared order
            have = list(ch_names) if ch_names is not None else list(self.ch_names)
            present = {c.lower() for c in have}
            wanted = [c for c in declared if c.lower() in present] if self.declared_contract.variable else declared
            x, ch_names = gather(name, x, have, wanted), wanted
            if len(wanted) < len(have) and self.data_reference == "average":  # the reference over what it reads
                x = x - x.mean(dim=1, keepdim=True)
        kw = {"ch_names": list(ch_names)} if self._takes_ch and ch_names is not None else {}
        # torch's fused nn.TransformerEncoder fast path (eval mode) bypasses the layers' Linear modules, so LoRA
        # adapters and attribution hooks on them would see nothing: run the modules one by one
        with common.no_mha_fastpath():  # looked up at call time (the dry-run tests swap it)
            if self._hooked is None:
                out = self._call(x, **kw)
            else:
                box = {}
                h = self._hooked.register_forward_hook(lambda m, i, o: box.__setitem__("out", o))
                try:
                    self._call(x, **kw)
                finally:
                    h.remove()
                out = box["out"]
        if isinstance(out, (tuple, list)):
            out = out[0]
        if not torch.is_tensor(out) or out.ndim != 3 or out.shape[0] != x.shape[0]:
            shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise UserModelError(f"user model {name}: tokens ({tokens_src}) gave {shape} for a batch of "
                                 f"{x.shape[0]}; the contract is (batch, n_tokens, d_model); fix: point `tokens` at "
                                 "the output before pooling (module:<path> or method:<name>), or reshape it in "
                                 "the module")
        return out

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """``(batch, n_chans, n_times)`` in the declared unit → ``(batch, n_tokens, d_model)``."""
        if not self.declared_contract.variable and ch_names is not None and list(ch_names) != self.ch_names:
            raise ChannelContractError(f"{self.name} was declared with fixed channels (channels.variable: false) and "
                                       f"cannot take {len(ch_names)} other channels; fix: zero-padded "
                                       "perturbations, or declare channels.variable: true")
        return self._tokens(x, ch_names)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self._block_list)

    def block_to_tokens(self, out) -> torch.Tensor:
        """A block output → ``(batch, n_tokens_b, d_b)``: 3-D kept, 4-D ``(B, F, H, W)`` → ``(B, H·W, F)``."""
        if isinstance(out, (tuple, list)):
            out = out[0]
        if out.ndim == 3:
            return out
        if out.ndim == 4:
            return out.flatten(2).transpose(1, 2)
        raise UserModelError(f"user model {self.name}: a block output of shape {tuple(out.shape)} is neither "
                             "(batch, tokens, dim) nor (batch, features, h, w); fix: a `blocks` pattern that "
                             "matches the transformer / conv blocks")


def user_code_sha256(class_path: str) -> str | None:
    """sha256 of the source file that defines ``class_path`` (None when it has none, e.g. a compiled module).

    It enters cell hashes and feature-cache keys, so editing the encoder's code retrains its cells and recomputes
    its cached tokens; code the file imports from elsewhere is not covered (see the README).
    """
    try:
        path = inspect.getsourcefile(import_object(class_path))
    except (TypeError, UserModelError):
        return None
    return _sha256(Path(path)) if path and Path(path).is_file() else None


def hashable_user_spec(spec: Mapping | UserModelConfig) -> dict:
    """A declaration as it enters a cell hash and a feature-cache key: without :data:`NOT_HASHED` keys, plus the
    sha256 of the encoder's source file (``code_sha256``) and of the declared weights (computed from the file
    when the declaration gives none, so replacing the file retrains).

    ``spec`` is hashed as given: a mapping as written in the config (the cell hashes: keys left at their default
    are not filled in, so those hashes do not change with this package's defaults) or a typed declaration (its
    ``to_dict()``: every key; the feature-cache keys). Returns plain values only.
    """
    um = user_model_config(spec)
    out = {k: v for k, v in _written(spec).items() if k not in NOT_HASHED}
    out["code_sha256"] = user_code_sha256(um.class_path)
    if um.pretrained and not um.pretrained.sha256:
        path = Path(um.pretrained.path).expanduser()
        out["pretrained"] = {**out["pretrained"], "sha256": _sha256(path) if path.is_file() else None}
    return out


def user_init_label(spec: Mapping | UserModelConfig) -> str:
    """The init label of a declaration's weights: ``pretrained:<file stem>@<sha256[:12]>`` (``random`` when none
    are declared). Reads the file for its sha256 when the declaration gives none.

    Raises
    ------
    UserModelError
        The file is missing.
    """
    pre = user_model_config(spec).pretrained
    if not pre:
        return "random"
    path = Path(pre.path).expanduser()
    if not path.is_file():
        raise UserModelError(f"pretrained weights {path} not found; fix: the path of a .safetensors / .pt state dict")
    return f"pretrained:{path.stem}@{(pre.sha256 or _sha256(path))[:12]}"


def register_user_models(specs: Mapping[str, Mapping | UserModelConfig] | None) -> list[str]:
    """Register every declaration of a config's ``user_models:`` section (idempotent; a name declared again with
    other settings replaces the earlier adapter). Returns the names.

    Raises
    ------
    UserModelError
        A name that is a built-in backbone, or a declaration that does not build.
    """
    names = []
    for name, spec in (specs or {}).items():
        um = user_model_config(spec, name)
        if name in BACKBONES.names() and name not in _REGISTERED:
            raise UserModelError(f"user model {name!r} has the name of a built-in backbone; fix: another name")
        if _REGISTERED.get(name) != um:
            BACKBONES._items[name] = make_user_adapter(name, um)
            _REGISTERED[name] = um
        names.append(name)
    return names


def dry_run_check(model: str, check, cache: dict) -> str | None:
    """``check(adapter, spec)`` on a registered user model built for its dry run — random init (declared weights
    are not loaded), the declared channels or the 10-20 system's 19 (:data:`DRY_RUN_CHANNELS`), the declared
    window — before any data is read; the problem it reports (a string) or None, cached in ``cache`` per
    declaration (``spec``: its :class:`UserModelConfig`). A declaration that does not build is the problem.

    Used by the AttnLRP (:func:`~eegfm_bench.interpret.lrp.user_lrp_problem`) and attention-map
    (:func:`~eegfm_bench.interpret.attention.check_attention_support`) checks.
    """
    um = user_spec(model)
    key = f"{model}:{um!r}"
    if key not in cache:
        names = list(um.channels.names) or DRY_RUN_CHANNELS
        try:
            adapter = BACKBONES.get(model)(names, _window_samples(um), 2, declared_weights=False)
        except UserModelError as err:
            cache[key] = str(err)
        else:
            cache[key] = check(adapter, um)
    return cache[key]


def user_spec(model: str) -> UserModelConfig | None:
    """The declaration of a registered user model (None for built-in backbones)."""
    return _REGISTERED.get(model)


def check_user_model(name: str, spec: Mapping | UserModelConfig, *, ch_names: list[str] | None = None,
                     n_outputs: int = 2, lora: bool = False, checks: dict | None = None) -> dict:
    """One batch through a declared user model before any data is read: build it (random init: declared weights are
    only checked for their file and sha256 here, and loaded strictly on the data's montage) on the declared
    channels (or the 19 channels of the 10-20 system), check the tokens' shape, that the block pattern matches modules whose hooks
    fire, that gradients reach its parameters and that the LoRA targets match modules (with ``lora``, a run uses
    the LoRA regime: peft wraps them and the adapters must receive gradients).

    Parameters
    ----------
    spec : mapping or UserModelConfig
        The declaration (as written in the config, or typed: :func:`user_model_config`).
    checks : dict of str to callable, optional
        More checks of the built adapter, each ``check(adapter, name, spec) -> str | None`` (a problem, or None;
        ``spec`` the typed :class:`UserModelConfig`),
        run before LoRA wraps the targets; e.g. ``{"attnlrp": eegfm_bench.interpret.lrp.adapter_lrp_problem}``
        (``eegfm-bench models --config`` passes it: the interpretability layer sits above the models and is handed
        in rather than imported here).

    Returns
    -------
    dict
        ``n_tokens``, ``d_model``, ``n_blocks``, ``n_params``, and per check of ``checks``: ``ok``, or its problem
        (e.g. why AttnLRP cannot run; Gradient×Input always can). Not an error here: only ``eegfm-bench attribute``
        with method ``attnlrp`` refuses it.

    Raises
    ------
    UserModelError
        Naming what is wrong and the fix.
    """
    um = user_model_config(spec, name)
    if um.pretrained:  # the file and its sha256 now; the strict load happens on the data's montage
        path = Path(um.pretrained.path).expanduser()
        if not path.is_file():
            raise UserModelError(f"user model {name}: pretrained weights {path} not found; fix: the path of a "
                                 ".safetensors / .pt state dict")
        if um.pretrained.sha256 and _sha256(path) != um.pretrained.sha256:
            raise UserModelError(f"user model {name}: pretrained weights {path}: sha256 {_sha256(path)} differs from "
                                 f"the declared {um.pretrained.sha256}; fix: the right file, or update sha256")
    cls = make_user_adapter(name, replace(um, pretrained=None))
    names = ch_names or (list(um.channels.names) or DRY_RUN_CHANNELS)
    n_times = _window_samples(um)
    ad = cls(names, n_times, n_outputs)
    if um.blocks:
        matched = _match(ad.model, um.blocks)
        if not matched:
            raise UserModelError(f"user model {name}: blocks pattern {um.blocks!r} matches no module; fix: one "
                                 f"of the module names {[n for n, _ in ad.model.named_modules() if n][:25]} (fnmatch "
                                 "pattern, e.g. 'layers.*')")
        fired = []
        hooks = [m.register_forward_hook(lambda mod, i, o, n=n: fired.append(n)) for n, m in matched]
    x = torch.randn(2, len(names), n_times, requires_grad=False)
    try:
        ad.train()
        t = ad.tokens(x, names)
    finally:
        if um.blocks:
            for h in hooks:
                h.remove()
    if um.blocks:
        silent = [n for n, _ in matched if n not in fired]
        if silent:
            raise UserModelError(f"user model {name}: blocks {silent} are not called by the forward that gives the "
                                 "tokens; fix: a blocks pattern of modules on that path")
    params = [p for p in ad.model.parameters() if p.requires_grad]
    no_grad = (f"user model {name}: no gradient reaches its parameters from the tokens; fix: tokens must be computed "
               "by the module's own parameters (not detached / under no_grad)")
    if not t.requires_grad:  # detached or computed under no_grad: backward would raise torch's own error
        raise UserModelError(no_grad)
    t.float().pow(2).mean().backward()
    if not params or all(p.grad is None or not torch.any(p.grad != 0) for p in params):
        raise UserModelError(no_grad)
    found = {k: (check(ad, name, um) or "ok") for k, check in (checks or {}).items()}  # before LoRA wraps targets
    if um.lora_targets:
        try:
            resolve_targets(ad, list(um.lora_targets))
        except LoraTargetError as err:
            raise UserModelError(f"user model {name}: lora_targets: {err}") from None
        if lora:  # peft wraps the targets and one forward/backward proves the adapters receive gradients
            try:
                apply_lora(ad, {})
            except Exception as err:
                raise UserModelError(f"user model {name}: LoRA on {um.lora_targets}: {err}") from None
    elif lora:
        raise UserModelError(f"user model {name}: regime lora but no lora_targets declared; fix: lora_targets")
    return {"n_tokens": ad.n_tokens(), "d_model": ad.d_model, "n_blocks": len(ad.blocks),
            "n_params": sum(p.numel() for p in ad.model.parameters()), **found}


__all__ = ["UserModelError", "register_user_models",
           "user_model_config",
           "check_user_model", "make_user_adapter", "user_spec", "load_user_weights", "user_init_label",
           "hashable_user_spec"]
