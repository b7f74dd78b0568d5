"""A ``_target_``'s parameter defaults and docstrings read from its source file, without
importing it: ``--help`` shows ``${default:}`` values and their notes without loading the
profiles, the datasets and TensorFlow with them."""

from __future__ import annotations

import ast
import functools
import inspect
import operator
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

UNKNOWN = object()  # what a reading returns where only importing the target can tell


def source_default(target: str, key: str) -> Any:
    """The default ``target`` (a dotted path, as ``_target_`` writes it) gives its parameter
    ``key``, as ``inspect.signature`` of the imported target would (a tuple stays a tuple),
    or ``UNKNOWN`` where its source does not say it in literals: a default computed by a
    call, a parameter taken from ``**kwargs``, a module not on disk.

    Args:
        target: A function or class, ``package.module.name``.
        key: The parameter's name.

    Returns:
        The default, or ``UNKNOWN``.
    """
    found = _definition(target)
    if found is None:
        return UNKNOWN
    default, (module, _, module_name, path) = _parameter_default(found, key, depth=0)
    if default is UNKNOWN:
        return UNKNOWN
    try:
        return _value(_Constants(module, module_name, path).visit(_copy(default)))
    except (ValueError, TypeError, SyntaxError, RecursionError, ArithmeticError):
        return UNKNOWN


def source_docstrings(target: str) -> list[str] | None:
    """``target``'s docstring and, for a class, its ``__init__``'s, as ``inspect.getdoc``
    gives them; None where the source cannot be read."""
    found = _definition(target)
    if found is None:
        return None
    node = found[1]
    docs = [ast.get_docstring(node) or ""]
    if isinstance(node, ast.ClassDef):
        init = _member(node, "__init__")
        docs.append((ast.get_docstring(init) or "") if init is not None else "")
    return docs


def _definition(target: str, depth: int = 0) -> tuple[ast.Module, ast.AST, str, str] | None:
    """The module's syntax tree, the class or function definition ``target`` names, the
    module's name and file, following ``from ... import`` in the module; None where it
    cannot be found."""
    located = _module_source(target)
    if located is None or depth > 4:
        return None
    module_name, path, attributes = located
    module = _parse(path)
    if module is None:
        return None
    node: ast.AST = module
    for i, attribute in enumerate(attributes):
        found = _member(node, attribute)
        if found is None and node is module:
            imported = _imported(module, module_name, path, attribute)
            if imported is not None:
                return _definition(".".join([imported, *attributes[i + 1:]]), depth + 1)
        if found is None:
            return None
        node = found
    if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    return module, node, module_name, path


def _parse(path: str) -> ast.Module | None:
    """The syntax tree of the source file ``path`` (read once per change of the file: a help
    reads one module for many keys); None where it does not parse. Never changed in place."""
    try:
        return _parsed(path, Path(path).stat().st_mtime_ns)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))


def _module_source(target: str) -> tuple[str, str, list[str]] | None:
    """(the module's name, its source file, the attributes after it) for a dotted
    ``target``, found as the import system would find it, but without importing it (nor the
    packages above it)."""
    parts = target.split(".")
    search: Any = None  # sys.path, for a top-level module
    spec = None
    taken = 0
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        found = _find_spec(name, search)
        if found is None:
            break
        spec, taken = found, i + 1
        search = found.submodule_search_locations
        if search is None:  # a module, not a package: the rest are its attributes
            break
    if spec is None or not spec.origin or not str(spec.origin).endswith(".py"):
        return None
    return ".".join(parts[:taken]), str(spec.origin), parts[taken:]


def _find_spec(name: str, search: Any) -> Any:
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, search)
        except Exception:  # a finder of some tool's that cannot answer: the next one
            continue
        if spec is not None:
            return spec
    return None


def _member(node: ast.AST, name: str) -> ast.AST | None:
    """The last class or function named ``name`` defined in ``node``'s body."""
    found = None
    for child in getattr(node, "body", ()):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and (
                child.name == name):
            found = child
    return found


def _imported(module: ast.Module, module_name: str, path: str, name: str) -> str | None:
    """The dotted path ``name`` is imported from in the module, if it is: at its top level,
    or in a function (a package's ``__getattr__`` that imports an optional part lazily)."""
    package = module_name if Path(path).name == "__init__.py" else module_name.rpartition(".")[0]
    for statement in ast.walk(module):  # breadth first: the top level first
        if not isinstance(statement, ast.ImportFrom):
            continue
        for alias in statement.names:
            if (alias.asname or alias.name) == name:
                base = statement.module or ""
                if statement.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - statement.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                return f"{base}.{alias.name}"
    return None


def _parameter_default(found: tuple[ast.Module, ast.AST, str, str], key: str,
                       depth: int) -> tuple[Any, tuple[ast.Module, ast.AST, str, str]]:
    """The expression of ``key``'s default in the found function's signature, or in the
    found class's ``__init__`` or dataclass fields, or else in its bases' (as the first
    ``__init__`` of the method resolution order), with where it was found."""
    module, node, module_name, path = found
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return _argument_default(node.args, key), found
    if not isinstance(node, ast.ClassDef) or depth > 8:
        return UNKNOWN, found
    init = _member(node, "__init__")
    if isinstance(init, ast.FunctionDef):
        return _argument_default(init.args, key), found
    if any(_is_dataclass(d) for d in node.decorator_list):
        for statement in node.body:
            if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                    and statement.target.id == key):
                return _field_default(statement.value), found
    for base in node.bases:  # an __init__ or a field inherited
        name = _name_of(base)
        if not name or "." in name:
            continue
        parent = _member(module, name)
        if parent is not None:
            base_found = (module, parent, module_name, path)
        else:
            imported = _imported(module, module_name, path, name)
            base_found = _definition(imported, depth + 1) if imported else None
        if base_found is not None:
            default, where = _parameter_default(base_found, key, depth + 1)
            if default is not UNKNOWN:
                return default, where
    return UNKNOWN, found


def _argument_default(args: ast.arguments, key: str) -> Any:
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = [*zip(positional, defaults, strict=True),
             *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    for argument, default in pairs:
        if argument.arg == key:
            return UNKNOWN if default is None else default
    return UNKNOWN


def _field_default(value: ast.expr | None) -> Any:
    if value is None:
        return UNKNOWN
    if isinstance(value, ast.Call) and _name_of(value.func).endswith("field"):
        given = {k.arg: k.value for k in value.keywords}
        return given.get("default", UNKNOWN)  # a default_factory: only a call tells
    return value


def _is_dataclass(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _name_of(target).split(".")[-1] == "dataclass"


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name_of(node.value)}.{node.attr}"
    return ""


class _Constants(ast.NodeTransformer):
    """Replaces a name in a default by the literal its module assigns it at its top level
    (``batch_size: int = DEFAULT_BATCH``), or the module it is imported from, so that
    ``literal_eval`` can read the whole default."""

    def __init__(self, module: ast.Module, module_name: str, path: str) -> None:
        self.module, self.module_name, self.path = module, module_name, path
        self.seen: list[str] = []

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.seen or len(self.seen) > 8:
            return node
        value = _assigned(self.module, node.id)
        constants = self
        if value is None:  # imported: its own module's constant
            source = _imported(self.module, self.module_name, self.path, node.id)
            located = _module_source(source) if source else None
            if located is None or len(located[2]) != 1:
                return node
            module = _parse(located[1])
            if module is None:
                return node
            value = _assigned(module, located[2][0])
            constants = _Constants(module, located[0], located[1])
            constants.seen = self.seen
        if value is None:
            return node
        self.seen.append(node.id)
        try:
            return constants.visit(_copy(value))
        finally:
            self.seen.pop()


def _assigned(module: ast.Module, name: str) -> ast.expr | None:
    """The value the module's top level last assigns ``name``, if it does."""
    found = None
    for statement in module.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name:
            found = value
    return found


OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
             ast.Pow: operator.pow}


def _value(node: ast.expr) -> Any:
    """A literal, as ``ast.literal_eval`` reads it, or arithmetic on numbers (``1 / 3``)."""
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
            raise ValueError("arithmetic on numbers only")
        return OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.Tuple | ast.List):
        values = [_value(e) for e in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    return ast.literal_eval(node)


def _copy(node: ast.expr) -> ast.expr:
    return ast.parse(ast.unparse(node), mode="eval").body


def docstring_of(target: Any) -> Iterator[str]:
    """``target``'s docstrings from its source, or from the imported object where the source
    cannot be read (a target made at run time)."""
    docs = source_docstrings(str(target))
    if docs is not None:
        yield from docs
        return
    from hydra._internal.utils import _locate

    try:
        found = _locate(str(target))
    except Exception:
        return
    for doc in (inspect.getdoc(found), inspect.getdoc(getattr(found, "__init__", None))):
        yield doc or ""
