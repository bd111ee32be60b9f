"""The parameters of every edit operation, as a recipe writes them (pydantic, no libcst).

`apply` imports the operation's libcst engine on first use, so loading and
validating recipes stays fast.

Every op that finds its target in the file shares one vocabulary (`Choose`, `Where`):
what the target is (`target`, `names`, `callee`, `arg`), where inside its value the edit
goes (`path`), and which of several matching places are edited (`within`, `nested`,
`occurrence`, `all`). By default a target must match exactly one place.
"""

from __future__ import annotations

import ast
import datetime
import keyword
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from patchkit.edits.model import (
    MODULE_SCOPE,
    EditBug,
    EditError,
    EditResult,
    EditSpec,
    Scalar,
    ValueType,
    a_type,
    compile_error,
    keeping_bom,
    type_name,
)
from patchkit.edits.unified_diff import FilePatch, ParsedDiff

if TYPE_CHECKING:
    from patchkit.edits.hunk_locate import FileOutcome

_QUALNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _parse(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse, with the parser's own give-ups on deeply nested code (`1+1+...`, `-----1`:
    RecursionError or MemoryError, raised at once) reported as the SyntaxError they are."""
    try:
        return ast.parse(source, mode=mode)
    except (RecursionError, MemoryError):
        raise SyntaxError("too deeply nested to parse", ("<recipe>", 1, 1, None)) from None


class _Engine(EditSpec):
    """An edit whose work is done by its engine: `compute`, which imports the op's libcst module
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


def _check_plain(value: Any, where: str) -> None:
    """A YAML value we can write as a Python literal: no dates, no custom tags."""
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, where)
            _check_plain(item, where)
    elif isinstance(value, (datetime.date, datetime.time)):
        raise ValueError(f"{where} {value!r} is a date (YAML reads it so): quote it, or write expr: ...")
    elif not isinstance(value, (str, int, float, bool, bytes, type(None))):
        raise ValueError(f"{where} {value!r} is not a literal (string, number, bool, null, list, dict)")


class WantsValue(BaseModel):
    model_config = ConfigDict(strict=True, defer_build=True)  # a mixin: built as the op that has it

    value: Any = Field(None, description="a literal (string, number, bool, null, list, dict)")
    expr: str | None = Field(None, description="Python expression source, for non-literals")
    type: ValueType | None = Field(None, description=(
        "the new value's type, said outright: replacing a literal of another type (a bool with a string, "
        "None with an int) is then meant and not warned about, and a string such as \"no\" where the code "
        "has a bool is kept (without `type: str` that is refused: did you mean false?)"))

    @model_validator(mode="after")
    def _one_of_value_or_expr(self) -> WantsValue:
        given = ("value" in self.model_fields_set) + (self.expr is not None)
        if given != 1:
            raise ValueError("give exactly one of `value` or `expr`")
        if self.expr is not None:
            try:
                _parse(self.expr.strip(), mode="eval")
            except SyntaxError as exc:  # a recipe error, not a target that is missing
                raise ValueError(f"expr {self.expr!r} is not a Python expression: {exc.msg}") from None
        else:
            _check_plain(self.value, "value")
        self._check_type()
        return self

    def _check_type(self) -> None:
        """`type` is the value's own (or the literal `expr`'s): it states a type, never converts."""
        if self.type is None:
            return
        if self.expr is not None:
            try:
                given = ast.literal_eval(self.expr.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return  # not a literal: its type is known when it runs
            what = f"expr {self.expr.strip()!r}"
        else:
            given, what = self.value, f"value {self.value!r}"
        actual = type_name(given)
        if actual != self.type:
            hint = f" (write {float(given)!r})" if actual == "int" and self.type == "float" else ""
            raise ValueError(f"{what} is {a_type(actual or type(given).__name__)}, not {a_type(self.type)} "
                             f"as `type: {self.type}` says{hint}")

    def describe(self) -> str:
        return self.expr if self.expr is not None else repr(self.value)


class Pick(BaseModel):
    """When a target matches several places: by default that is an error naming them all."""

    model_config = ConfigDict(defer_build=True)  # a mixin: built as the op that has it

    occurrence: int | None = Field(
        None, ge=1, description="the target matches several places: edit the Nth (1-based, in source order)")
    all: bool = Field(False, description="the target matches several places: edit every one of them")

    @model_validator(mode="after")
    def _one_way_to_pick(self) -> Pick:
        if self.occurrence is not None and self.all:
            raise ValueError("give `occurrence` or `all`, not both")
        return self


class Choose(Pick):
    """Which of the places a target matches are edited: exactly one, unless told."""

    within: str | None = Field(
        None, description="only this scope, named exactly: `Class`, `Class.method`, `func`, or `<module>` "
                          "for the top level; scopes nested inside it count only with `nested: true`")
    nested: bool = Field(False, description="with `within`: the scopes nested inside it count too")

    @model_validator(mode="after")
    def _scope_is_a_scope(self) -> Choose:
        if self.nested and self.within is None:
            raise ValueError("`nested` applies to a `within` scope: give `within` too")
        if self.within is not None and self.within != MODULE_SCOPE and not _QUALNAME.match(self.within):
            raise ValueError(f"within {self.within!r} is not a scope like Class.method, func or <module>")
        return self


def _target_expression(text: str) -> ast.expr:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not an assignment target like x, self.x or d['k']") from None
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        raise ValueError(f"{text!r} is not an assignment target like x, self.x or d['k']")
    return node


def _check_callee(value: str | list[str] | None) -> None:
    texts = [value] if isinstance(value, str) else value or []
    if not texts and value is not None:
        raise ValueError("callee: give at least one")
    for text in texts:
        try:
            ast.parse(text.strip(), mode="eval")
        except SyntaxError:
            raise ValueError(f"callee {text!r} is not a Python expression like f, mod.f or super().__init__") from None


def _check_identifier(value: str, field: str, noun: str = "a Python name", alternative: str = "") -> None:
    """A keyword argument's or parameter's name: an identifier, and not one of Python's keywords."""
    if not value.isidentifier():
        raise ValueError(f"{field} {value!r} is not {noun}{alternative}")
    if keyword.iskeyword(value):
        raise ValueError(f"{field} {value!r} is a Python keyword: no call can pass it and no parameter has it")


Target = Literal["assignment", "call_arg", "return", "default"]


class Where(Choose):
    """What the target is, and where inside its value the edit goes."""

    target: Target = Field(
        "assignment", description="assignment: a value assigned to one of `names` (=, :, +=, |=); "
                                  "call_arg: argument `arg` of calls to `callee`; return: the value of a "
                                  "return statement (in `within`); default: the default of parameter `arg`")
    names: list[str] | None = Field(
        None, min_length=1,
        description="target: assignment. Targets as written in the code, alternatives: `x`, `self.x`, "
                    "`Config.x`, `d['k']`; a bare `x` matches only a bare `x`")
    callee: str | list[str] | None = Field(
        None, description="target: call_arg. The called expression as written: `setup`, `torch.compile`, "
                          "`super().__init__`, `', '.join`; a list gives alternatives")
    arg: str | int | None = Field(
        None, description="call_arg: a keyword name or a position (0-based, positional arguments); "
                          "default: the parameter's name")
    path: list[Scalar] = Field(
        default_factory=list,
        description="steps into the value, like subscripts: a dict key, a list/tuple index, a call's keyword "
                    "or position; a `lambda:` on the way is looked through, e.g. [default_factory]")

    @field_validator("names")
    @classmethod
    def _names_are_targets(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            _target_expression(name)
        return value

    @field_validator("callee")
    @classmethod
    def _callee_is_an_expression(cls, value: str | list[str] | None) -> str | list[str] | None:
        _check_callee(value)
        return value

    @field_validator("arg")
    @classmethod
    def _arg_is_a_name_or_position(cls, value: str | int | None) -> str | int | None:
        if isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise ValueError("`arg` is a keyword name or a position 0, 1, ...")
        if isinstance(value, str):
            _check_identifier(value, "`arg`", "a keyword name", " (or write a position: 0, 1, ...)")
        return value

    @model_validator(mode="after")
    def _fields_fit_the_target(self) -> Where:
        needs = {"assignment": {"names"}, "call_arg": {"callee", "arg"}, "return": set(), "default": {"arg"}}
        own = needs[self.target]
        for field in ("names", "callee", "arg"):
            given = getattr(self, field) is not None
            if field in own and not given:
                raise ValueError(f"target: {self.target} needs `{field}`")
            if field not in own and given:
                raise ValueError(f"`{field}` does not apply to target: {self.target}")
        if self.target == "default" and not isinstance(self.arg, str):
            raise ValueError("target: default names the parameter: `arg` is its name")
        return self

    @property
    def callees(self) -> list[str]:
        return [self.callee] if isinstance(self.callee, str) else list(self.callee or [])

    def describe_target(self) -> str:
        if self.target == "assignment":
            return "assignment to " + " or ".join(self.names or [])
        if self.target == "call_arg":
            kind = f"keyword {self.arg}" if isinstance(self.arg, str) else f"positional argument {self.arg}"
            return f"{kind} of a call to {' or '.join(self.callees)}"
        if self.target == "return":
            return "return statement with a value"
        return f"parameter {self.arg} with a default"


class ListInsert(_Engine, Where):
    """Ensure `values` are elements of a list/tuple/set display (the right one of `A + [..]`)."""

    kind: ClassVar[str] = "list_insert"
    values: list[Scalar] = Field(min_length=1, description="literals that must be elements")
    after: Scalar = Field(None, description="insert after this element; missing: append, and say so")

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.list_insert import run

        return run(self, source)


class ListRemove(_Engine, Where):
    """Ensure `values` are not elements of a list/tuple/set display."""

    kind: ClassVar[str] = "list_remove"
    values: list[Scalar] = Field(min_length=1)

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.list_remove import run

        return run(self, source)


class SetValue(_Engine, Where, WantsValue):
    """Ensure the target's value (or the part of it at `path`) equals `value`/`expr`, by meaning."""

    kind: ClassVar[str] = "set_value"

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.set_value import run

        return run(self, source)


class DictSet(_Engine, Where, WantsValue):
    """Ensure a dict display maps `key` to `value`/`expr` (the last of duplicate keys: Python keeps it)."""

    kind: ClassVar[str] = "dict_set"
    key: Scalar

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.dict_set import run

        return run(self, source)


class CallKwarg(_Engine, Choose, WantsValue):
    """Ensure a call to `callee` passes `keyword=value` (added when missing)."""

    kind: ClassVar[str] = "call_kwarg"
    callee: str | list[str] = Field(
        description="the called expression as written: `SamplingParams`, `torch.compile`, "
                    "`super().__init__`, `', '.join`; a list gives alternatives")
    keyword: str = Field(description="the keyword argument's name (a Python name, not a keyword like `class`)")

    @field_validator("keyword")
    @classmethod
    def _keyword_is_a_name(cls, value: str) -> str:
        _check_identifier(value, "keyword")
        return value

    @field_validator("callee")
    @classmethod
    def _callee_is_an_expression(cls, value: str | list[str]) -> str | list[str]:
        _check_callee(value)
        return value

    @property
    def callees(self) -> list[str]:
        return [self.callee] if isinstance(self.callee, str) else list(self.callee)

    def describe_target(self) -> str:
        return f"call to {' or '.join(self.callees)}"

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.call_kwarg import run

        return run(self, source)


class CodemodEdit(_Engine):
    """`file` (relative to the recipe, may not leave its folder) defines `transformer`,
    a libcst CSTTransformer or Codemod subclass, built with `args` as keyword arguments.
    A transformer may set `self.not_found = "why"` to report that its target is absent."""

    kind: ClassVar[str] = "codemod"
    file: str
    transformer: str = Field(description="class name in `file`")
    args: dict[str, Any] = Field(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(None)

    def not_python(self, error: str) -> EditError:
        return EditError(f"codemod {self.transformer} produced Python that does not compile ({error}); "
                         "nothing was changed")

    def bind(self, base_dir: Path) -> CodemodEdit:
        self._base_dir = base_dir
        return self

    def module_path(self) -> Path:
        base = (self._base_dir or Path.cwd()).resolve()
        path = (base / self.file).resolve()
        if not path.is_relative_to(base):
            raise EditError(f"codemod file {self.file} is outside the recipe's folder {base}")
        if not path.is_file():
            raise EditError(f"codemod file {path} does not exist")
        return path

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.codemod import run

        return run(self, source)



class ReplaceFunction(_Engine, Pick):
    """Ensure the body of function `function` (a qualname: `func`, `Class.method`,
    `outer.inner`) is `body`, compared by meaning (AST). Decorators, signature and
    everything outside the body stay byte-identical; `body` is re-indented to fit."""

    kind: ClassVar[str] = "replace_function"
    function: str = Field(description="qualified name, e.g. Class.method, func or outer.inner")
    body: str = Field(description="Python source of the new body, dedented; re-indented to the function's indentation")
    keep_docstring: bool = Field(True, description="keep the function's docstring when `body` has none of its own")

    @model_validator(mode="after")
    def _valid_target_and_body(self) -> ReplaceFunction:
        if not _QUALNAME.match(self.function):
            raise ValueError(f"function {self.function!r} is not a qualified name like Class.method or func")
        try:
            tree = _parse(self.body_source)
        except SyntaxError as exc:  # a recipe error, not a target that is missing
            raise ValueError(
                f"body of {self.function} is not valid Python: {exc.msg} (body line {exc.lineno})"
            ) from None
        if not isinstance(tree, ast.Module) or not tree.body:
            raise ValueError(f"body of {self.function} has no statements (write `pass` for an empty body)")
        return self

    @property
    def body_source(self) -> str:
        """`body` as parseable module text: dedented when written indented, ending in a newline."""
        text = self.body
        first = next((line for line in text.splitlines() if line.strip()), "")
        if first[:1] in (" ", "\t"):
            text = textwrap.dedent(text)
        return text if text.endswith("\n") else text + "\n"

    def has_docstring(self) -> bool:
        return ast.get_docstring(ast.parse(self.body_source), clean=False) is not None

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.replace_function import run

        return run(self, source)


class DiffEdit(EditSpec):
    """A unified diff (git or plain; one or several files), applied by meaning: each hunk is
    found where its lines are (within the def/class its header names), not at its line
    number. `file` is relative to the recipe (and may not leave its folder); or `text` inline.
    `reverse` applies it backwards (what it added is taken out, what it removed put back).
    Paths map to modules of the step's package after `strip` leading components (`patch -p`)."""

    kind: ClassVar[str] = "diff"
    file: str | None = Field(None, description="a .patch/.diff file next to the recipe (relative to its folder)")
    text: str | None = Field(None, description="the unified diff itself, inline")
    strip: int = Field(1, ge=0, description="leading path components to drop, like patch -p (default 1: a/, b/)")
    reverse: bool = Field(False, description="apply the diff backwards (patch -R): take a fix out with the "
                                             "same diff that put it in")
    _base_dir: Path | None = PrivateAttr(None)
    _parsed: ParsedDiff | None = PrivateAttr(None)
    _targets: list[tuple[str, str, FilePatch]] | None = PrivateAttr(None)  # of _parsed, computed once

    @model_validator(mode="after")
    def _one_source(self) -> DiffEdit:
        if (self.file is None) == (self.text is None):
            raise ValueError("give exactly one of `file` (a diff next to the recipe) or `text` (the diff inline)")
        if self.text is not None:
            self._read(self.text, "the inline diff")
        return self

    def _read(self, text: str, source: str) -> None:
        from patchkit.edits.unified_diff import DiffError, parse_diff, reversed_diff

        try:
            parsed = parse_diff(text, source)
            if self.reverse:
                parsed = reversed_diff(parsed)
            self._parsed, self._targets = parsed, None
            self.targets()
        except DiffError as exc:
            self._parsed = None
            raise ValueError(str(exc)) from None

    def bind(self, base_dir: Path) -> DiffEdit:
        """Read `file` (relative to the recipe's folder); EditError when it cannot be read."""
        self._base_dir = base_dir
        if self.file is None:
            return self
        base = base_dir.resolve()
        path = (base / self.file).resolve()
        if not path.is_relative_to(base):
            raise EditError(f"diff file {self.file} is outside the recipe's folder {base}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EditError(f"cannot read diff file {path}: {exc}") from None
        try:
            self._read(text, str(self.file))
        except ValueError as exc:
            raise EditError(str(exc)) from None
        return self

    @property
    def parsed(self) -> ParsedDiff:
        """The diff, read; `file` diffs are read by `bind` (load_recipe)."""
        if self._parsed is None:
            if self.file is not None and self._base_dir is None:
                self.bind(Path.cwd())
            if self._parsed is None:
                raise EditError("the diff was not read")
        return self._parsed

    def targets(self) -> list[tuple[str, str, FilePatch]]:
        """(path after strip, module, FilePatch) for every file of the diff, in its order."""
        from patchkit.edits.unified_diff import DEV_NULL, DiffError, module_of, strip_path

        if self._targets is not None:
            return self._targets
        out = []
        for patch in self._parsed.files if self._parsed is not None else self.parsed.files:
            if DEV_NULL not in (patch.old_path, patch.new_path):
                old, new = strip_path(patch.old_path, self.strip), strip_path(patch.new_path, self.strip)
                if old != new:
                    raise DiffError(f"renames are not supported ({old} -> {new}, diff line {patch.line}): a "
                                    "patch step edits files in place; check `strip` if the paths differ only "
                                    "in their first folder")
            path = patch.path(self.strip)
            out.append((path, module_of(path), patch))
        self._targets = out
        return out

    @property
    def modules(self) -> list[str]:
        return [module for _, module, _ in self.targets()]

    def apply_to(self, path: str, source: str | None) -> FileOutcome:
        """The FileOutcome (hunk_locate.py) of the diff's file `path` on `source` (None: absent).
        A changed result that does not compile is refused (the diff's doing, not ours)."""
        from patchkit.edits.hunk_locate import FileOutcome, apply_file_patch

        patch = next((p for rel, _, p in self.targets() if rel == path), None)
        if patch is None:
            raise EditError(f"the diff does not name {path}")
        outcome = apply_file_patch(patch, path, source)
        if outcome.verdict == "changed" and outcome.source is not None:
            error = compile_error(source or "", outcome.source)
            if error is not None:
                return FileOutcome("not_found", source, f"{path}: the diff applies, but the result does not "
                                                        f"compile ({error}); nothing changed", outcome.hunks)
        return outcome

    def apply(self, source: str) -> EditResult:
        """One file's diff on its source (several files: a patch step applies each by `apply_to`)."""
        return keeping_bom(self._apply_one, source)

    def _apply_one(self, source: str) -> EditResult:
        targets = self.targets()
        if len(targets) != 1:
            raise EditError(f"the diff changes {len(targets)} files ({', '.join(t[0] for t in targets)}): "
                            "apply it file by file")
        path, _, patch = targets[0]
        if patch.added or patch.deleted:
            raise EditError(f"the diff {'adds' if patch.added else 'deletes'} {path}: patch steps change "
                            "files that exist")
        outcome = self.apply_to(path, source)
        message = "already in place" if outcome.verdict == "already" else outcome.message
        return EditResult(outcome.verdict, source if outcome.source is None else outcome.source, message)
