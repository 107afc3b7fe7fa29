"""A class's source lines, each file parsed once.

``inspect.getsourcelines`` finds a class by parsing its whole file, again for every class: the
audit asks for hundreds of classes in a few hundred transformers files, and that parsing was a
fifth of its time.  These give the same answer from one parse a file (a test checks them against
inspect on the installed transformers).
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache


@functools.lru_cache(maxsize=None)
def class_starts(filename: str) -> dict[str, int]:
    """{qualname: 0-based line where the class starts} for every class in the file: its first
    decorator's line if it has one, and the first class of a qualname in source order, as inspect."""
    starts: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                starts.setdefault(name, first - 1)
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}{child.name}.<locals>.")
            else:
                visit(child, prefix)

    visit(ast.parse("".join(linecache.getlines(filename))), "")
    return starts


def class_source_lines(cls: type) -> tuple[list[str], int]:
    """What ``inspect.getsourcelines(cls)`` gives: the class's lines and its first line's number.
    Raises OSError (or TypeError for a built-in class) where inspect would.  A file is parsed once a
    process: a source file edited while it runs is not read again."""
    cls = inspect.unwrap(cls)
    filename = inspect.getsourcefile(cls)
    if filename is None:
        raise OSError(f"source code of {cls.__qualname__} not available")
    module = inspect.getmodule(cls, filename)
    lines = linecache.getlines(filename, module.__dict__ if module is not None else None)
    start = class_starts(filename).get(cls.__qualname__) if lines else None
    if start is None:
        raise OSError(f"could not find class definition of {cls.__qualname__}")
    return inspect.getblock(lines[start:]), start + 1


def source_of(obj) -> str:
    """``inspect.getsource(obj)``, a class's from :func:`class_source_lines`."""
    if inspect.isclass(obj):
        return "".join(class_source_lines(obj)[0])
    return inspect.getsource(obj)
