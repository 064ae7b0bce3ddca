"""The state API's package loads its public names on first use; each is what its module defines,
and the imports type checkers read name the same homes."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import streamstate.state as package


def test_every_public_name_is_its_modules_object():
    assert sorted(package._HOMES) == sorted(package.__all__)
    for name, home in package._HOMES.items():
        assert getattr(package, name) is getattr(importlib.import_module(f"streamstate.state.{home}"), name)
    assert set(package.__all__) <= set(dir(package))


def test_the_type_checking_imports_name_the_same_homes():
    tree = ast.parse(Path(package.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        alias.name: node.module.removeprefix("streamstate.state.")
        for node in guarded.body if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert imported == package._HOMES


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'StateSpecs'"):
        package.StateSpecs  # noqa: B018
    with pytest.raises(ImportError):
        exec("from streamstate.state import StateSpecs", {})
