"""The audit's one-parse-a-file class source against inspect's, on the installed transformers."""

import importlib
import inspect

import pytest

from attnscale.audit import source_lines

FAMILIES = ("bert", "llama", "t5", "gemma2", "whisper", "clip", "deepseek_v3", "mllama", "bart", "gpt2")


def classes_of(family: str) -> list[type]:
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return [obj for obj in vars(module).values() if inspect.isclass(obj) and obj.__module__.startswith("transformers.")]


@pytest.mark.parametrize("family", FAMILIES)
def test_class_source_lines_match_inspect(family):
    classes = classes_of(family)
    assert len(classes) > 5
    for cls in classes:
        assert source_lines.class_source_lines(cls) == inspect.getsourcelines(cls), cls
        assert source_lines.source_of(cls) == inspect.getsource(cls)


def test_nested_decorated_and_local_classes(tmp_path, monkeypatch):
    """A decorated class starts at its decorator; a class inside a function has '<locals>' in its
    qualname; a nested class is found under its outer class; the first of two same-named classes wins."""
    (tmp_path / "sample_classes.py").write_text(
        "import functools\n\n"
        "def deco(cls):\n    return cls\n\n"
        "@deco\nclass Outer:\n    class Inner:\n        x = 1\n\n"
        "def make():\n    class Local:\n        y = 2\n    return Local\n\n"
        "if True:\n    class Twice:\n        first = True\nelse:\n    class Twice:\n        first = False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("sample_classes")
    for cls in (module.Outer, module.Outer.Inner, module.make(), module.Twice):
        assert source_lines.class_source_lines(cls) == inspect.getsourcelines(cls)
    assert source_lines.class_source_lines(module.Outer)[1] == 6  # the decorator's line


def test_a_builtin_class_is_refused_as_inspect_refuses_it():
    with pytest.raises(TypeError):
        source_lines.class_source_lines(int)
