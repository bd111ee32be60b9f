"""Transformers the codemod cases (and tests/unit/test_edits.py) run, as a recipe's codemod file."""

import libcst as cst
from libcst.codemod import Codemod, SkipFile


class RenameName(cst.CSTTransformer):
    """Rename a name; report not_found when neither the old nor the new name occurs."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new
        self.seen = False
        self.not_found = None

    def leave_Name(self, original, updated):
        if updated.value in (self.old, self.new):
            self.seen = True
        if updated.value == self.old:
            return updated.with_changes(value=self.new)
        return updated

    def leave_Module(self, original, updated):
        if not self.seen:
            self.not_found = f"no name {self.old} (nor {self.new}) in this file"
        return updated


class AddConstant(Codemod):
    """A libcst Codemod: append `NAME = value` unless the module already has it."""

    def __init__(self, context, name: str, value: int) -> None:
        super().__init__(context)
        self.name, self.value = name, value

    def transform_module_impl(self, tree):
        if f"{self.name} = " in tree.code:
            return tree
        line = cst.parse_statement(f"{self.name} = {self.value}\n")
        return tree.with_changes(body=[*tree.body, line])


class SkipAll(Codemod):
    def transform_module_impl(self, tree):
        raise SkipFile("nothing for me here")


class Crash(cst.CSTTransformer):
    def leave_Name(self, original, updated):
        raise RuntimeError("kaboom")


NOT_A_TRANSFORMER = 42
