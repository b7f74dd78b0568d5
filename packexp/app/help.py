"""``python -m packexp --help``: Hydra's help, its sections described from the comments in conf/."""

from __future__ import annotations

import contextlib
import re
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from hydra._internal.utils import get_args_parser  # Hydra's own
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, ListConfig, OmegaConf

from packexp.config import constructor_default, register_resolvers
from packexp.config.sources import UNKNOWN, docstring_of, source_default
from packexp.errors import refuse

WIDTH = 100  # columns of a line of help
NOTE_COLUMN = 32  # where the keys' notes start, where the key and value leave room
DEFAULT = re.compile(r"^\$\{default:([^}]*)\}$")  # a value written ${default:} or ${default:f}


def register_help_resolvers() -> None:
    """Lets ``hydra.help.template`` use ``${help.groups:}``, ``${help.config:}`` and
    ``${help.options:GROUP,...}``: resolved only when Hydra prints the help."""
    for name, resolver in [("help.groups", groups_help), ("help.config", config_help),
                           ("help.options", options_help)]:
        OmegaConf.register_new_resolver(name, resolver, replace=True)


def help_argv(argv: list[str]) -> list[str]:
    """``--help GROUP ...`` as Hydra takes it: Hydra reads only overrides after ``--help``,
    so each bare group name becomes one override of the help template, which then lists the
    group's options (``${help.options:GROUP}``); other arguments are left as they are."""
    args, _ = get_args_parser().parse_known_intermixed_args(argv)
    groups = [o for o in args.overrides if re.fullmatch(r"\w[\w/]*", o)]
    if not args.help or not groups:
        return argv
    rest = list(argv)
    for group in groups:
        del rest[len(rest) - 1 - rest[::-1].index(group)]
    overrides = [o for o in args.overrides if o not in groups]
    # Beside the other overrides: Hydra takes them as one run of arguments.
    at = rest.index(overrides[0]) if overrides else len(rest)
    names = ",".join(f"'{group}'" for group in groups)
    return [*rest[:at], f"hydra.help.template=${{help.options:{names}}}", *rest[at:]]


def groups_help() -> str:
    """Each config group with its options, as Hydra lists them, wrapped to ``WIDTH``."""
    lines = []
    for group in sorted(g for g in GlobalHydra.instance().hydra.list_all_config_groups()
                        if not is_hydra_group(g)):
        lines += textwrap.wrap(", ".join(group_options(group)), WIDTH,
                               initial_indent=f"{group}: ",
                               subsequent_indent=" " * (len(group) + 2), break_on_hyphens=False)
    return template_text("\n".join(lines))


def options_help(*groups: str, _root_: DictConfig) -> str:
    """Each option of each of ``groups``, the chosen one marked ``*``, with the first sentence
    of its file's opening comment. An unknown group ends the process with one line (exit 2):
    Hydra would print a resolver's exception as a traceback."""
    known = GlobalHydra.instance().hydra.list_all_config_groups()
    for group in groups:
        if group not in known:
            refuse(f"--help {group}: no config group {group!r} (python -m packexp --help "
                   "lists them)")
    sources = config_dirs(_root_)
    blocks = []
    for group in groups:
        chosen = _root_.hydra.runtime.choices.get(group)
        options = group_options(group)
        width = max(map(len, options), default=0) + 2
        lines = [f"{group}: choose one with {group}=OPTION (* the current choice)"]
        for option in options:
            path = find_file(sources, f"{group}/{option}.yaml")
            note = file_note(path.read_text()) if path else ""
            lead = f"  {option:<{width - 1}}{'*' if option == chosen else ' '} "
            lines.append(wrapped(note, lead, " " * len(lead)) if note else lead.rstrip())
        blocks.append("\n".join(lines))
    return template_text("\n\n".join(blocks) + "\n")


def config_help(*, _root_: DictConfig) -> str:
    """The composed config but ``hydra``, resolved, one line per key: ``key: value  # note``,
    the note the first sentence of the key's comment in conf/, or, for a ``${default:}`` key
    without one, of its argument's entry in the target's docstring (Google style)."""
    notes = config_notes(_root_)
    cfg = OmegaConf.masked_copy(_root_, [k for k in _root_ if k != "hydra"])
    with defaults_from_source():
        return template_text("\n".join(config_lines(cfg, notes)))


@contextlib.contextmanager
def defaults_from_source() -> Iterator[None]:
    """``${default:}`` resolved from the targets' source files (``config.sources``), so the
    help imports no profile, dataset or model module, nor TensorFlow with them; a default
    the source does not state in literals is read as a run reads it, by importing."""
    OmegaConf.register_new_resolver("default", source_or_imported_default, replace=True)
    try:
        yield
    finally:
        register_resolvers()


def source_or_imported_default(source: str = "", *, _parent_: DictConfig, _node_: Any) -> Any:
    """``config.constructor_default``'s value, read from the source where it can be."""
    target = source or _parent_.get("_target_")
    if target is not None:
        value = source_default(str(target), str(_node_._key()))
        if value is not UNKNOWN:
            return OmegaConf.create(list(value)) if isinstance(value, tuple) else value
    return constructor_default(source, _parent_=_parent_, _node_=_node_)


def config_lines(node: DictConfig, notes: Mapping[str, str], path: str = "",
                 indent: str = "") -> Iterator[str]:
    """``node``'s keys, a line each, nested mappings below their key."""
    for key in node:
        where = f"{path}.{key}" if path else str(key)
        raw = node._get_node(key)._value()
        try:
            value = node[key]
        except Exception:  # an unresolvable value (a bad override) shows as written
            value = raw
        note = notes.get(where, "")
        if not note and isinstance(raw, str) and (default := DEFAULT.match(raw)):
            note = docstring_note(default.group(1) or node.get("_target_"), str(key))
        if isinstance(value, DictConfig) and len(value):
            yield noted(f"{indent}{key}:", note)
            yield from config_lines(value, notes, where, indent + "  ")
        else:
            yield noted(f"{indent}{key}: {flow(value)}", note)


def config_notes(root: DictConfig) -> dict[str, str]:
    """Dotted key -> note, from the primary config's file and the chosen option's of each
    group; a group's own key notes the option chosen and its file's opening comment. Files in
    the global package (experiments) note only keys the others leave bare."""
    sources = config_dirs(root)
    files = [("", find_file(sources, f"{root.hydra.job.config_name}.yaml"), "")]
    for group, option in root.hydra.runtime.choices.items():
        if option is not None and not is_hydra_group(group):
            name, _, package = group.partition("@")
            files.append((package or name.replace("/", "."),
                          find_file(sources, f"{name}/{option}.yaml"), option))
    notes: dict[str, str] = {}
    later: dict[str, str] = {}
    for package, path, option in files:
        if path is None:
            continue
        text = path.read_text()
        header = re.search(r"^# @package (\S+)", text, re.MULTILINE)
        if header:
            package = {"_global_": "", "_group_": package}.get(header.group(1),
                                                                header.group(1))
        if package and option:
            notes.setdefault(package, f"{option}: {file_note(text)}".rstrip(": "))
        target = later if header and not package else notes
        for key, note in key_notes(text).items():
            target.setdefault(f"{package}.{key}" if package else key, note)
    return {**later, **notes}


def key_notes(text: str) -> dict[str, str]:
    """Dotted key -> the first sentence of the comment just above it (or, failing that, at
    the end of its line) in the YAML ``text``; the file's opening comment belongs to no key."""
    lines = text.splitlines()
    opening = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    notes: dict[str, str] = {}

    def visit(node: yaml.Node, prefix: str) -> None:
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            line = key_node.start_mark.line
            if isinstance(value_node, yaml.MappingNode):
                visit(value_node, f"{key}.")
            if lines[line][:key_node.start_mark.column].strip(" -"):
                continue  # inside a flow mapping: its line's comments are its parent's
            above = []
            for i in range(line - 1, -1, -1):
                if not lines[i].lstrip().startswith("#"):
                    break
                above.insert(0, lines[i])
            note = first_sentence(above) if line > opening else ""
            if not note:
                same = value_node.end_mark.line == line  # a scalar or flow value
                rest = lines[line][value_node.end_mark.column if same else
                                   key_node.end_mark.column + 1:].strip()
                note = first_sentence([rest]) if rest.startswith("#") else ""
            if note:
                notes[key] = note

    root = yaml.compose(text)
    if isinstance(root, yaml.MappingNode):
        visit(root, "")
    return notes


def file_note(text: str) -> str:
    """The first sentence of the file's opening comment (past ``# @package`` and the
    commands that run it)."""
    opening = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        opening.append(line)
    return first_sentence([c for c in opening
                           if not re.match(r"#\s*(@package|python )", c)])


def first_sentence(comment: list[str]) -> str:
    """The first sentence of comment lines (``# ...``), up to an indented list it opens."""
    words = []
    for line in comment:
        body = line.lstrip().removeprefix("#")
        if words and (body.startswith("  ") or body.strip().startswith("python ")):
            break  # the list or example lines a sentence ending in ':' opens
        words.append(body.strip())
    text = " ".join(w for w in words if w)
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if (char in ".?!" and depth <= 0 and re.match(r"\s|$", text[i + 1:])
                and not re.search(r"\b(e\.g|i\.e|al|etc|vs|cf)$", text[:i])):
            return text[:i + 1]
    return text.removesuffix(":")


def docstring_note(target: Any, argument: str) -> str:
    """The first sentence of ``argument``'s entry in the Args section of ``target``'s
    docstring (or of its class's ``__init__``), read from its source; "" without one."""
    for doc in docstring_of(target):
        entry = args_section(doc).get(argument)
        if entry:
            return first_sentence([entry])
    return ""


def args_section(doc: str) -> dict[str, str]:
    """Argument -> its text, from a Google-style docstring's ``Args:`` section."""
    entries: dict[str, str] = {}
    name, indent = None, None
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return entries
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth <= len(lines[start]) - len(lines[start].lstrip()):
            break  # the next section
        entry = re.match(r"\s*\**(\w+)(?: \(.*?\))?: (.*)", line)
        if indent is None or depth == indent:
            indent = depth
            if entry:
                name = entry.group(1)
                entries[name] = entry.group(2)
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def noted(line: str, note: str) -> str:
    """``line`` and ``# note`` in the notes' column (or two spaces on), the note whole,
    wrapped to ``WIDTH`` on comment lines of its own in that column."""
    if not note:
        return line
    lead = line.ljust(NOTE_COLUMN - 1) + " # " if len(line) < NOTE_COLUMN - 1 else line + "  # "
    return wrapped(note, lead, " " * NOTE_COLUMN + "# ")


def wrapped(text: str, lead: str, indent: str) -> str:
    """``lead`` and ``text`` wrapped at words to ``WIDTH`` columns, each further line
    starting with ``indent``: a sentence is never cut (at least 24 columns of it a line)."""
    return "\n".join(textwrap.wrap(text, max(WIDTH, len(lead) + 24), initial_indent=lead,
                                    subsequent_indent=indent, break_long_words=False,
                                    break_on_hyphens=False))


def flow(value: Any) -> str:
    """A value as YAML writes it on one line (a list in brackets)."""
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    text = yaml.safe_dump(value, default_flow_style=True, width=sys.maxsize)
    return text.removesuffix("\n").removesuffix("\n...")


def config_dirs(root: DictConfig) -> list[Path]:
    """The folders of the config search path, in Hydra's order (``--config-dir`` first)."""
    return [Path(s.path) for s in root.hydra.runtime.config_sources
            if s.schema == "file" and s.path]


def find_file(dirs: list[Path], name: str) -> Path | None:
    """The first of ``dirs`` that holds ``name``, as Hydra searches them."""
    return next((d / name for d in dirs if (d / name).is_file()), None)


def group_options(group: str) -> list[str]:
    """The options of a config group, sorted, from Hydra's config search path."""
    return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


def is_hydra_group(group: str) -> bool:
    return group == "hydra" or group.startswith("hydra/")


def template_text(text: str) -> str:
    """``text`` for Hydra's help template, which ``string.Template`` fills: ``$`` doubled."""
    return text.replace("$", "$$")
