"""Configs: frozen dataclasses <- TOML file <- ``--key=value`` overrides. Unknown keys are errors.

A config is a frozen dataclass whose fields are plain values (bool, int, float, str, tuples of
those) or nested config dataclasses (TOML sections). Overrides name a key as ``section.key``
or, when the name is unique across sections, as a bare ``key``; aliases map the flags of other
tools onto our keys (``--wd`` -> ``train.weight_decay``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    pass


def home_path(path: str, key: str) -> str:
    """A config's path with a leading ``~`` (``~/data/sst``, ``~user/sst``) made the home
    folder, as a shell would on the command line: no shell reads a config file or
    ``--data.path=~/x``. ``key``: the path's config key, named when no such home exists."""
    if not path.startswith("~"):
        return path
    try:
        return str(Path(path).expanduser())
    except RuntimeError:  # "~nosuchuser/x", or no HOME and no password entry
        user = path[1:].split("/")[0]
        whose = f"a user {user!r}" if user else "HOME"
        raise ConfigError(f"{key}: {path!r}: no home folder found for {whose}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        data = Path(path).read_bytes()
        # A byte-order mark (Windows editors write one) is no TOML statement: read past it.
        return tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: {err}") from err
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text ({err.reason})") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror})") from err


def shipped_configs() -> dict[str, Path]:
    """Name -> file of the configs treeqa ships (the repository's configs/, installed as the
    package ``treeqa.configs``): ``--config tree_lstm_fine`` works wherever treeqa is."""
    folder = resources.files("treeqa.configs")
    files = [f for f in folder.iterdir() if f.name.endswith(".toml")]
    return {f.name.removesuffix(".toml"): Path(str(f)) for f in sorted(files, key=lambda f: f.name)}


def find_config(path: Path) -> Path:
    """``--config``'s file: ``path`` when it exists, else the shipped config a bare name
    (``tree_lstm_fine`` or ``tree_lstm_fine.toml``) names."""
    if path.exists():
        return path
    shipped = shipped_configs()
    name = path.name.removesuffix(".toml")
    if path.parent == Path("."):  # a bare name
        if name in shipped:
            return shipped[name]
        raise ConfigError(f"{path}: no such file, nor a config treeqa ships ({', '.join(shipped)})")
    if name in shipped:
        raise ConfigError(f"{path}: no such file; treeqa ships this config as --config {name}")
    return path  # load_toml says it cannot read it


def parse_overrides(args: Sequence[str]) -> list[tuple[str, str]]:
    """``["--a=1", "--b", "2"]`` -> ``[("a", "1"), ("b", "2")]``; a lone ``--flag`` means true."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"expected --key=value or --key value, got {arg!r}")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            key, value = arg[2:], args[i + 1]
            i += 1
        else:
            key, value = arg[2:], "true"
        pairs.append((key.replace("-", "_"), value))
        i += 1
    return pairs


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check a TOML value (or convert an override string) against a field type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value in (None, "none", "None") and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: {value!r} is not a valid {tp}")
    if origin is tuple:
        item = typing.get_args(tp)[0]
        if isinstance(value, str):  # "0.8,0.9", or as TOML writes it: "[0.8, 0.9]"
            inside = value.strip()
            if inside[:1] + inside[-1:] in ("[]", "()"):
                inside = inside[1:-1]
            value = [v for v in inside.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, item, where) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (
            "true",
            "1",
            "yes",
            "on",
            "false",
            "0",
            "no",
            "off",
        ):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        else:
            try:
                number = int(str(value).replace("_", ""))
            except ValueError:
                raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if not -(2**63) <= number < 2**63:  # else written to config.toml, which TOML forbids
            raise ConfigError(f"{where}: expected a 64-bit integer, got {value!r}")
        return number
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported config type {tp}")


def check_fields(
    config: Any,
    section: str,
    *,
    at_least: Mapping[str, float] = {},
    below: Mapping[str, float] = {},
    choices: Mapping[str, Sequence[str]] = {},
) -> None:
    """Raise :class:`ConfigError` naming ``section.field`` for the first value out of range or
    not among its choices (``not value >= low``, so NaN is out of every range; so is infinity:
    ``--lr inf`` would train NaN weights)."""
    for name in [*at_least, *below]:
        value = getattr(config, name)
        if not math.isfinite(value):
            raise ConfigError(f"{section}.{name}: expected a finite number, got {value!r}")
    for name, low in at_least.items():
        value = getattr(config, name)
        if not value >= low:
            raise ConfigError(f"{section}.{name}: expected at least {low}, got {value!r}")
    for name, high in below.items():
        value = getattr(config, name)
        if not value < high:
            raise ConfigError(f"{section}.{name}: expected less than {high}, got {value!r}")
    for name, options in choices.items():
        value = getattr(config, name)
        if value not in options:
            raise ConfigError(
                f"{section}.{name}: expected one of {' | '.join(options)}, got {value!r}"
            )


def _place(
    key: str, raw_key: str, sections: Mapping[str, Any], owners: Mapping[str, list[str]]
) -> tuple[str, str]:
    """(section, key) that override ``--raw_key`` (``key`` after aliases) names, "" for the top
    level (a bare key naming a top-level field means that field); unknown or ambiguous keys are
    a ConfigError."""
    if "." in key:
        section, sub = key.split(".", 1)
        if section not in sections:
            raise _unknown(section, list(sections), "--" + raw_key)
        if sub not in _field_types(sections[section]):
            elsewhere = [p for p in owners.get(sub, []) if p and p != section]
            if elsewhere:  # --train.eval_every for --schedule.eval_every
                raise ConfigError(
                    f"--{raw_key}: {section} has no key {sub!r}; it is --{elsewhere[0]}.{sub}"
                )
            raise _unknown(sub, list(_field_types(sections[section])), f"--{raw_key} ({section})")
        return section, sub
    places = owners.get(key)
    if not places:
        raise _unknown(key, list(owners), "--" + raw_key)
    if "" in places:
        return "", key
    if len(places) > 1:
        options = ", ".join(f"--{p}.{key}" for p in places)
        raise ConfigError(f"--{raw_key} is ambiguous: say {options}")
    return places[0], key


def _unknown(key: str, known: Sequence[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=3)
    hint = (
        f"; did you mean {', '.join(close)}?"
        if close
        else f"; known keys: {', '.join(sorted(known))}"
    )
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "config") -> T:
    """Build ``cls`` from a (possibly nested) mapping, checking every key and type."""
    types_ = _field_types(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in types_:
            raise _unknown(key, list(types_), where)
        tp = types_[key]
        if _is_config(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.{key}: expected a section (table), got {value!r}")
            values[key] = from_dict(tp, value, f"{where}.{key}")
        else:
            values[key] = _coerce(value, tp, f"{where}.{key}")
    return cls(**values)


def merge_overrides(
    cls: type,
    data: dict[str, Any],
    overrides: Sequence[tuple[str, str]],
    aliases: Mapping[str, str] = {},
    named: int = 0,
) -> dict[str, Any]:
    """Put each override into the nested dict at the key it names (section.key or a unique key);
    of two for one key the later wins. The first ``named`` come from named flags (``--epochs``),
    whose place on the command line is lost: one of those and a later override setting the
    same key to another value are an error, not a silent choice."""
    sections = {name: tp for name, tp in _field_types(cls).items() if _is_config(tp)}
    owners: dict[str, list[str]] = {}
    for name, tp in _field_types(cls).items():
        owners.setdefault(name, []).append("")
        for sub in _field_types(tp) if _is_config(tp) else ():
            owners.setdefault(sub, []).append(name)
    for name in sections:
        if name in data and not isinstance(data[name], dict):
            raise ConfigError(f"config.{name}: expected a section (table), got {data[name]!r}")
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    flags: dict[tuple[str, str], tuple[str, str]] = {}  # (section, key) -> a named flag's
    for index, (raw_key, value) in enumerate(overrides):
        place = _place(aliases.get(raw_key, raw_key), raw_key, sections, owners)
        if index < named:
            flags[place] = (raw_key, value)
        elif place in flags and flags[place][1] != value:
            flag, given = flags[place]
            raise ConfigError(
                f"--{flag} {given} and --{raw_key}={value} both set {'.'.join(filter(None, place))}:"
                " give one"
            )
        section, key = place
        if section:
            out.setdefault(section, {})[key] = value
        else:
            out[key] = value
    return out


def to_dict(config: Any) -> dict[str, Any]:
    return {
        k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()
    }


def to_toml(config: Any) -> str:
    """The resolved config as TOML (scalars first, then one table per section)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            # JSON's escapes are TOML's, control characters included; TOML also wants DEL escaped.
            return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    data = dataclasses.asdict(config)
    lines = [
        f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict) and v is not None
    ]
    for k, v in data.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [
                f"{kk} = {value(vv)}" for kk, vv in v.items() if vv is not None
            ]
    return "\n".join(lines) + "\n"


def model_key_given(
    section: Any,
    overrides: Sequence[tuple[str, str]],
    key: str,
    aliases: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``model.<key>`` was set by hand: in the config's [model] ``section`` or by an
    override (``--key`` or ``--model.key``, through ``aliases``)."""
    named = (key, f"model.{key}")
    in_section = isinstance(section, Mapping) and key in section
    return in_section or any((aliases or {}).get(k, k) in named for k, _ in overrides)


def changed_settings(
    stored: str | Mapping[str, Any], config: Any, free: Collection[str]
) -> list[str]:
    """The settings, as ``section.key: old -> new``, where ``config`` differs from the TOML
    ``stored`` (text, or as read) by ``to_toml``, leaving out the keys of ``free``."""

    def flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {prefix + k: v}
        return out

    read = tomllib.loads(stored) if isinstance(stored, str) else stored
    before, after = flat(read), flat(tomllib.loads(to_toml(config)))
    # A setting the stored run does not name came after it: that run had its default.
    for k in after.keys() - before.keys():
        default = _default_of(config, k)
        if default is not dataclasses.MISSING:  # (as TOML reads it back: a tuple is a list)
            before[k] = list(default) if isinstance(default, tuple) else default
    return [
        f"{k}: {before.get(k)!r} -> {after.get(k)!r}"
        for k in sorted(before.keys() | after.keys())
        if k not in free and before.get(k) != after.get(k)
    ]


def _default_of(config: Any, key: str) -> Any:
    """The default of the dataclass field ``section.key`` names in ``config`` (MISSING where
    there is none)."""
    *path, name = key.split(".")
    obj = config
    for part in path:
        obj = getattr(obj, part, None)
    fields = {f.name: f for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
    field = fields.get(name)
    if field is None:
        return dataclasses.MISSING
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default
