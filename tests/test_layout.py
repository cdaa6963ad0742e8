"""The test suite's layout: code the tests share lives in tests/helpers/, so no file under tests/
imports a `test_*.py` module (a test file pulled in by another runs its module-level code twice
and ties the two files' fixtures and names together)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _package_of(path: Path) -> list[str]:
    """The dotted package of a file under tests/, as parts: tests/model/x.py -> ["tests", "model"]."""
    return ["tests", *path.parent.relative_to(TESTS).parts]


def imports_of_test_modules(source: str, path: Path) -> list[str]:
    """The modules named `test_*` that `source` (the text of `path`) imports, each as it is written."""
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom):
            package = _package_of(path)
            base = package[: len(package) - node.level + 1] if node.level else []
            module = [*base, *(node.module.split(".") if node.module else [])]
            if module and module[-1].startswith("test_"):
                found.append(".".join(module))
            else:  # `from tests.model import test_train`: the imported name is the module
                found += [".".join([*module, a.name]) for a in node.names if a.name.startswith("test_")]
    return found


def test_no_file_under_tests_imports_a_test_module():
    offenders = {}
    for path in sorted(TESTS.rglob("*.py")):
        found = imports_of_test_modules(path.read_text(encoding="utf-8"), path)
        if found:
            offenders[str(path.relative_to(TESTS.parent))] = found
    assert offenders == {}, "move what these import into tests/helpers/"


def test_the_check_sees_every_form_of_the_import():
    here = TESTS / "model" / "test_example.py"
    for source in ("from tests.model.test_train import write_text", "from .test_train import write_text",
                   "import tests.model.test_train", "from tests.model import test_train",
                   "from . import test_train", "from ..viewer.cli.test_train import TINY_FLAGS",
                   "def f():\n    from tests.model.test_train import write_text\n"):
        assert imports_of_test_modules(source, here), source
    for source in ("from tests.helpers.training import write_text", "import pytest", "from . import conftest",
                   "from tests.helpers import tokenizers as tc"):
        assert imports_of_test_modules(source, here) == [], source
