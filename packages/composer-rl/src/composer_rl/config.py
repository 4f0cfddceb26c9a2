"""The one configuration system of every `composer-rl` command that trains or scores.

A command's settings are one pydantic model, a `CommandConfig` (`RLConfig` for `rl`,
`Stage1Config` for `stage1`, `pretrain` and `sft`, `EvalCommandConfig` for `eval`), whose
sections are the configurations of the components they configure, nested as they are
(torchtitan's `Configurable.Config`, prime-rl's nested pydantic): RL's `[train]` is the
training service's `TrainingConfig`, its `[rollout]` the episode runner's `RunnerConfig`,
a stage-one phase's `[sft.optim]` the `OptimConfig` of `composer_model.build_optimizer`.
Every one is read the same way, in this order, each changing only what it names:

    the command's defaults  <  a TOML file (``--config FILE``; ``.json`` is read too)
                            <  flags given on the command line

Every leaf is one flag, ``--section.field`` (underscores written as dashes), made from the
model by `add_flags` with its default, its description and what it accepts, so ``--help``
lists each knob once. A section given in a file is laid over that section's defaults
(``[sft.optim] lr = 1e-3`` keeps the SFT phase's other optimizer settings), and a plain
table (``[rewards]``) replaces its default.

An unknown key, a bad value, a key that is set from another one (`CommandConfig.derived`)
or an unreadable file is a `ConfigError` of one line that names the full dotted key, where
it came from (the file or the flags), and what is accepted there; the CLI prints it and
exits with status 2 before anything starts.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import tomllib
import types
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from composer_rl.errors import ConfigError

C = TypeVar("C", bound="CommandConfig")

FLAG_PREFIX = "cfg::"
"""The argparse `dest` of a knob's flag: ``cfg::`` and its dotted key."""


class CommandConfig(BaseModel):
    """The whole configuration of one command: the root its sections hang from.

    Three tables say how old spellings and shared values are handled; each is empty unless
    a command needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Other spellings of a knob's flag, e.g. ``{"train.parallel.dp": ("--dp",)}``: short
    forms and the spellings earlier versions documented. `--help` shows them in the knob's
    one entry."""

    renamed: ClassVar[Mapping[str, str]] = {}
    """Earlier dotted names of keys or whole sections (old -> new) that a file or a
    programmatic override may still use, so an older file or a run directory's recorded
    configuration still loads, e.g. ``{"train.lr": "train.optim.lr"}``."""

    derived: ClassVar[Mapping[str, str]] = {}
    """Keys of a component's section that the command sets from another knob (key -> what
    sets it, in words), e.g. ``{"train.seed": "the run's `seed`"}``: a section can be a
    component's whole configuration while a value shared by several components is one knob.
    They have no flag and are not written by `to_toml`; a file or flag may give one only
    with the value it gets anyway (a file an earlier version wrote), any other is refused."""

    def _share(self, **sections: BaseModel) -> None:
        """Replace sections of this instance from its own `model_validator(mode="after")`,
        which copies the knobs in `derived` into them: the models are frozen, and this is
        the validator completing the instance it is building."""
        for name, section in sections.items():
            object.__setattr__(self, name, section)


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The model of a nested section (a field typed as a pydantic model, or as one or None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return section_type(members[0])
    return None


# ---------------------------------------------------------------------------------------
# Reading: the file, the flags, and the defaults, merged and validated in one place.


def read_file(path: Path) -> dict[str, Any]:
    """A configuration file's tables: TOML, or JSON for a file ending in ``.json``."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as error:
        raise ConfigError(f"config file {path} cannot be read: {error.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except ValueError as error:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ConfigError(f"{path} is not valid {kind}: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings at the top level")
    return data


def _parent(tree: dict[str, Any], dotted: str) -> tuple[dict[str, Any], str]:
    """The table that holds `dotted` in `tree` (made where missing), and the key's last part."""
    node = tree
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    return node, leaf


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` -> ``{"a": {"b": 1, "c": 2}}``."""
    tree: dict[str, Any] = {}
    for key, value in dotted.items():
        node, leaf = _parent(tree, key)
        node[leaf] = value
    return tree


def _dotted_keys(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every key of a nested table, sections and leaves, by dotted name."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        yield name
        if isinstance(value, Mapping):
            yield from _dotted_keys(value, name + ".")


def _pop(tree: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    *parents, leaf = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    return True, node.pop(leaf)


def _apply_renames(root: type[CommandConfig], tree: dict[str, Any], origin: str) -> None:
    """Move keys given under an earlier name (`CommandConfig.renamed`) to their new place."""
    for old, new in root.renamed.items():
        found, value = _pop(tree, old)
        if not found:
            continue
        node, leaf = _parent(tree, new)
        if leaf in node:
            raise ConfigError(f"{origin}: {old} and {new} both given; {old} is {new}'s old name")
        node[leaf] = value


def _derived_given(
    root: type[CommandConfig], tree: Mapping[str, Any], origin: str
) -> list[tuple[str, str, Any]]:
    """(origin, key, value) of every key of `tree` that `root` sets from another knob."""
    out = []
    for key in root.derived:
        found, value = _pop(copy.deepcopy(dict(tree)), key)
        if found:
            out.append((origin, key, value))
    return out


def _check_derived(config: CommandConfig, given: list[tuple[str, str, Any]]) -> None:
    """A key set from another knob may be given only with the value it gets anyway (what a
    configuration written by an earlier version holds); any other value is refused."""
    data = config.model_dump(mode="json")
    for origin, key, value in given:
        _, actual = _pop(copy.deepcopy(data), key)
        if value != actual:
            source = type(config).derived[key]
            raise ConfigError(
                f"{origin}: {key} ({_shown(value)}) is not a setting of its own: it is "
                f"{source}; set that instead"
            )


def _merge(
    model: type[BaseModel], base: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """`given` laid over `base`: into sections key by key, replacing anything else."""
    out = dict(base)
    for key, value in given.items():
        info = model.model_fields.get(key)
        sub = section_type(info.annotation) if info is not None else None
        current = out.get(key)
        if sub is not None and isinstance(value, Mapping):
            out[key] = _merge(sub, current if isinstance(current, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def load(
    root: type[C],
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> C:
    """`root`'s defaults, then the file at `path`, then `overrides` (dotted keys, the flags
    given), validated as a whole. A problem is a one-line `ConfigError`."""
    sources: list[tuple[str, dict[str, Any]]] = []
    if path is not None:
        sources.append((str(path), read_file(path)))
    if overrides:
        sources.append(("flags", nest(overrides)))
    return load_tables(root, sources)


def load_tables(root: type[C], sources: list[tuple[str, dict[str, Any]]]) -> C:
    """`root`'s defaults with each (origin, tables) of `sources` laid over them in order,
    validated as a whole: what `load` does with a file's tables and the flags'."""
    data: dict[str, Any] = root().model_dump()
    derived: list[tuple[str, str, Any]] = []
    given: list[tuple[str, set[str]]] = []
    for origin, tables in sources:
        tree = copy.deepcopy(tables)
        _apply_renames(root, tree, origin)
        derived += _derived_given(root, tree, origin)
        given.append((origin, set(_dotted_keys(tree))))
        data = _merge(root, data, tree)
    try:
        config = root.model_validate(data)
    except ValidationError as error:
        raise explain_validation(error, given, root) from None
    _check_derived(config, derived)
    return config


# ---------------------------------------------------------------------------------------
# Errors: one line naming the dotted key, where it came from and what it accepts.


def _related(a: str, b: str) -> bool:
    return bool(a) and (a == b or a.startswith(b + ".") or b.startswith(a + "."))


def _origin_of(key: str, given: list[tuple[str, set[str]]]) -> str:
    hits = [origin for origin, keys in given if any(_related(key, k) for k in keys)]
    return " + ".join(hits or [origin for origin, _ in given] or ["defaults"])


def _section_model(root: type[BaseModel], section: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = root
    for part in section:
        info = model.model_fields.get(str(part)) if model is not None else None
        model = section_type(info.annotation) if info is not None else None
    return model


def accepted_keys(root: type[CommandConfig], section: tuple[Any, ...], unknown: str) -> str:
    """' (did you mean <key>?); <section> accepts a, b, c': the keys valid where `unknown`
    was found, and the closest of them when one is close."""
    model = _section_model(root, section)
    if model is None:
        return ""
    where = ".".join(str(p) for p in section)
    prefix = where + "." if where else ""
    keys = sorted(k for k in model.model_fields if prefix + k not in root.derived)
    close = difflib.get_close_matches(unknown, keys, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    return f"{hint}; {where or 'the top level'} accepts {', '.join(keys)}"


def explain_validation(
    error: ValidationError, given: list[tuple[str, set[str]]], root: type[CommandConfig]
) -> ConfigError:
    """One line for every problem pydantic found: unknown keys by their dotted name with
    what their section accepts, bad values with the key, the constraint and the value."""
    problems = []
    for item in error.errors():
        loc = item["loc"]
        key = ".".join(str(p) for p in loc)
        origin = _origin_of(key, given)
        if item["type"] == "extra_forbidden":
            problems.append(
                f"{origin}: unknown key {key!r}{accepted_keys(root, loc[:-1], str(loc[-1]))}"
            )
        elif item["type"] == "missing":
            problems.append(f"{origin}: {key}: required")
        else:
            message = str(item["msg"]).removeprefix("Value error, ")
            value = item.get("input")
            # A whole section (what a model validator sees) is noise next to its message.
            got = "" if isinstance(value, Mapping | BaseModel) else f" (got {value!r})"
            problems.append(f"{origin}: {key + ': ' if key else ''}{message}{got}")
    return ConfigError("; ".join(problems))


# ---------------------------------------------------------------------------------------
# Flags: one per knob, made from the model.


@dataclass(frozen=True)
class Knob:
    """One setting of a command: its dotted key, its field, and the command's default."""

    key: str
    info: FieldInfo
    default: Any

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


@dataclass(frozen=True)
class Section:
    """A nested section of a command's configuration and its knobs."""

    key: str  # dotted; "" for the top level
    description: str
    knobs: tuple[Knob, ...]


def _description(info: FieldInfo | None, model: type[BaseModel]) -> str:
    if info is not None and info.description:
        return info.description
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split())


def sections(root: type[CommandConfig]) -> list[Section]:
    """The command's sections in order (the top level first), each with its knobs and
    their defaults as the command has them (a phase's own, not its class's); the keys set
    from other knobs (`CommandConfig.derived`) are left out."""
    out: list[Section] = []

    def walk(model: type[BaseModel], defaults: Any, prefix: str, info: FieldInfo | None) -> None:
        note = ""
        if defaults is None:  # an optional section, off by default: its class's defaults
            defaults = model().model_dump(mode="json")
            note = " (off unless a key of it is given)"
        knobs: list[Knob] = []
        nested: list[tuple[type[BaseModel], Any, str, FieldInfo]] = []
        for name, field in model.model_fields.items():
            key = prefix + name
            if key in root.derived:
                continue
            sub = section_type(field.annotation)
            if sub is not None:
                nested.append((sub, defaults.get(name), key + ".", field))
            else:
                knobs.append(Knob(key, field, defaults.get(name)))
        if knobs:
            out.append(Section(prefix.rstrip("."), _description(info, model) + note, tuple(knobs)))
        for sub, sub_defaults, sub_prefix, field in nested:
            walk(sub, sub_defaults, sub_prefix, field)

    walk(root, root().model_dump(mode="json"), "", None)
    return out


def knobs(root: type[CommandConfig]) -> list[Knob]:
    """Every knob of the command, by dotted key."""
    return [knob for section in sections(root) for knob in section.knobs]


def _members(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None is accepted)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        members = tuple(a for a in args if a is not type(None))
        optional = len(members) < len(args)
        return (members[0] if len(members) == 1 else typing.Union[members]), optional  # noqa: UP007
    return annotation, False


def _kind(annotation: Any) -> str:
    """What a value of `annotation` is, in words (for help and errors)."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        each = _kind(args[0]) if args else "a value"
        count = len(args) if origin is tuple and Ellipsis not in typing.get_args(annotation) else 0
        return f"{count} values, each {each}" if count > 1 else f"a list, each {each}"
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return "a table"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_kind(a) for a in typing.get_args(annotation))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
    if annotation in names:
        return names[annotation]
    if annotation is Path:
        return "a path"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table"
    return getattr(annotation, "__name__", str(annotation))


def accepts(info: FieldInfo) -> str:
    """What a field accepts, in words: e.g. 'an integer > 0', 'one of drop, regenerate, or
    none'."""
    annotation, optional = _members(info.annotation)
    text = _kind(annotation)
    symbols = (
        (annotated_types.Gt, "gt", ">"),
        (annotated_types.Ge, "ge", ">="),
        (annotated_types.Lt, "lt", "<"),
        (annotated_types.Le, "le", "<="),
    )
    bounds = [
        f"{symbol} {getattr(m, attr)}"
        for m in info.metadata
        for kind, attr, symbol in symbols
        if isinstance(m, kind)
    ]
    if bounds:
        text += " " + " and ".join(bounds)
    return text + (", or none" if optional else "")


def _metavar(annotation: Any) -> str:
    annotation, _ = _members(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(annotation)) + "}"
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _metavar(args[0]) if args else "V"
    names = {bool: "BOOL", int: "N", float: "X", str: "TEXT", Path: "PATH"}
    if annotation in names:
        return names[annotation]
    return "JSON" if origin in (dict, Mapping) or annotation is dict else "V"


def _nargs(annotation: Any) -> int | str | None:
    annotation, _ = _members(annotation)
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return "?"
    if origin in (list, set, frozenset):
        return "+"
    if origin is tuple:
        args = typing.get_args(annotation)
        return "+" if Ellipsis in args or not args else len(args)
    return None


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _help(knob: Knob) -> str:
    text = knob.info.description or ""
    text = (text + " " if text else "") + f"(default {_shown(knob.default)}; {accepts(knob.info)})"
    return text.replace("%", "%%")


def add_flags(
    parser: argparse.ArgumentParser,
    root: type[CommandConfig],
    *,
    only: Collection[str] | None = None,
    config_help: str | None = None,
) -> None:
    """``--config FILE`` and one ``--section.field`` flag per knob of `root`, grouped by
    section (a TOML table each). `only`: the top-level keys this command shows flags for
    (the file may still give the others, so one file serves the commands that share a
    configuration). Values are kept as text and parsed by pydantic (`load_args`)."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=config_help
        or "a TOML file (or .json) with any of the settings below, as [section] tables; "
        "flags given on the command line win over it, and it over the defaults",
    )
    for section in sections(root):
        if only is not None and section.key.split(".")[0] not in only and section.key:
            continue
        title = f"[{section.key}]" if section.key else "top-level settings"
        group = parser.add_argument_group(title, section.description.replace("%", "%%") or None)
        for knob in section.knobs:
            if only is not None and knob.key not in only and not section.key:
                continue
            aliases = root.flag_aliases.get(knob.key, ())
            nargs = _nargs(knob.info.annotation)
            group.add_argument(
                knob.flag,
                *aliases,
                dest=FLAG_PREFIX + knob.key,
                metavar=_metavar(knob.info.annotation),
                nargs=nargs,
                const="true" if nargs == "?" else None,
                help=_help(knob),
            )


def parse_flag(raw: str) -> Any:
    """A flag's text as a value for pydantic: ``none``/``null`` is None; a value starting
    with ``[`` or ``{`` is JSON (a list or a table); anything else stays text."""
    text = raw.strip()
    if text.lower() in ("none", "null"):
        return None
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"flag value {raw!r} is not valid JSON: {error}") from None
    return raw


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs given on the command line (dotted key -> value)."""
    out: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if not dest.startswith(FLAG_PREFIX) or value is None:
            continue
        if isinstance(value, list):  # nargs: several words, or one JSON list
            value = (
                parse_flag(value[0])
                if len(value) == 1 and value[0].lstrip().startswith("[")
                else [parse_flag(v) for v in value]
            )
        else:
            value = parse_flag(value)
        out[dest.removeprefix(FLAG_PREFIX)] = value
    return out


def load_args(root: type[C], args: argparse.Namespace) -> C:
    """The command's configuration from its parsed command line (`add_flags`)."""
    return load(root, getattr(args, "config", None), overrides_from_args(args))


# ---------------------------------------------------------------------------------------
# Writing: the resolved configuration as the TOML `--config` reads.

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, Mapping):
        items = (
            f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None
        )
        return "{" + ", ".join(items) + "}"
    return json.dumps(str(value))  # a TOML basic string uses JSON's escapes


def to_toml(config: CommandConfig) -> str:
    """The resolved configuration as TOML, one table a section, what `load` reads back to
    the same configuration, except a setting that is None where its default is not: TOML
    has no null, so it is left out and reads as the default. Keys set from other knobs
    (`CommandConfig.derived`) are left out too; they follow those knobs again."""
    data = config.model_dump(mode="json")
    for key in type(config).derived:
        _pop(data, key)
    chunks: list[str] = []

    def table(name: str, body: Mapping[str, Any]) -> None:
        scalars = [
            f"{_toml_key(str(k))} = {_toml_value(v)}"
            for k, v in body.items()
            if v is not None and not isinstance(v, Mapping)
        ]
        if name:
            chunks.append(f"\n[{name}]")
        chunks.extend(scalars)
        for k, v in body.items():
            if isinstance(v, Mapping):
                table(f"{name}.{_toml_key(str(k))}" if name else _toml_key(str(k)), v)

    table("", data)
    return "\n".join(chunks).lstrip("\n") + "\n"


__all__ = [
    "CommandConfig",
    "ConfigError",
    "Knob",
    "Section",
    "accepts",
    "add_flags",
    "explain_validation",
    "knobs",
    "load",
    "load_args",
    "load_tables",
    "nest",
    "overrides_from_args",
    "parse_flag",
    "read_file",
    "section_type",
    "sections",
    "to_toml",
]
