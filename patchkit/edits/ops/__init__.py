"""The edit operations, one package each: `spec.py` is what a recipe writes (pydantic, no
libcst), `engine.py` computes the edit with libcst, imported only when an edit is computed.

An engine never imports its spec: the spec hands it the vocabulary (targets.py) and its own
fields, so that spec -> engine is the only edge between them. The registry is `OPS` in
patchkit/edits/__init__.py.
"""

from __future__ import annotations

from patchkit.edits.model import EditBug, EditError, EditResult, EditSpec, keeping_bom


class EngineSpec(EditSpec):
    """An edit whose work is done by its engine: `compute`, which imports the op's engine
    (a checked reference: mypy sees the import and the engine's signature).

    A `changed` result is compiled before it is returned: text that is not Python is a
    bug of ours (EditBug; a user's codemod gets the blame for its own), never a result."""

    def compute(self, source: str) -> EditResult:  # pragma: no cover - each op has its own
        raise NotImplementedError(f"edit {self.kind} has no engine")

    def apply(self, source: str) -> EditResult:
        return keeping_bom(self._apply, source)

    def _apply(self, source: str) -> EditResult:
        result = self.compute(source)
        if result.verdict == "changed":
            from patchkit.edits.tree import result_compile_error  # the engines import libcst anyway

            error = result_compile_error(source, result.source)
            if error is not None:
                raise self.not_python(error)
        return result

    def not_python(self, error: str) -> EditError:
        return EditBug(f"patchkit bug: the {self.kind} edit produced Python that does not compile "
                       f"({error}); nothing was changed. Please report it with the recipe and the file.")
