"""The edit library's tests that are not one before/after case: those are data, one folder
of cases per op (tests/unit/edit_cases, run by test_edit_cases.py).

Here: what shows in the hunks of a larger file (only the `within` scope changes, untouched
code stays byte-identical), the registry, the codemod op's files and errors, the edit
envelope, results that must compile, and the cases that take more than one edit.
"""

from __future__ import annotations

import difflib
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from patchkit.edits import EDIT_KINDS, OPS, Edit, EditBug, EditError, EditResult
from patchkit.edits.testing import assert_edit, assert_idempotent

# --------------------------------------------------------------------------- helpers


def code(text: str) -> str:
    """A source file written inline: dedented, without the leading newline."""
    return textwrap.dedent(text).lstrip("\n")


def run(kind: str, source: str, **params: Any) -> EditResult:
    return Edit.model_validate({kind: params}).apply(source)


def changed(kind: str, source: str, **params: Any) -> EditResult:
    """Apply once (must change), then again: the second apply must find it in place (the
    shipped harness, patchkit.edits.testing, also checks that the result compiles)."""
    return assert_idempotent(kind, source, **params)


def unchanged(kind: str, source: str, verdict: str, **params: Any) -> EditResult:
    """Apply and expect `verdict` ("already" or "not_found") with the source untouched."""
    if verdict == "already":
        return assert_edit(kind, source, source, **params)
    result = run(kind, source, **params)
    assert result.verdict == verdict, result.message
    assert result.source == source
    return result


def hunks(before: str, after: str) -> list[tuple[int, str, str]]:
    """(first line number, old lines, new lines) for each run of differing lines.

    Lines compare with their line endings, so every line not in a hunk is byte-identical.
    """
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [(i1 + 1, "".join(a[i1:i2]), "".join(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def insert(source: str, values: list[Any], names: list[str] | None = None, **params: Any) -> str:
    return changed("list_insert", source, names=names or ["x"], values=values, **params).source


def remove(source: str, values: list[Any], names: list[str] | None = None, **params: Any) -> str:
    return changed("list_remove", source, names=names or ["x"], values=values, **params).source


def set_value(source: str, names: list[str] | None = None, **params: Any) -> str:
    return changed("set_value", source, names=names or ["x"], **params).source


def dict_set(source: str, key: Any, names: list[str] | None = None, **params: Any) -> str:
    return changed("dict_set", source, names=names or ["d"], key=key, **params).source


def kwarg(source: str, keyword: str = "k", callee: str = "f", **params: Any) -> str:
    return changed("call_kwarg", source, callee=callee, keyword=keyword, **params).source


def test_helpers_detect_a_non_idempotent_edit_and_an_unexpected_verdict() -> None:
    # The helpers carry most assertions below, so they must be able to fail.
    with pytest.raises(AssertionError):
        changed("list_insert", 'x = ["a"]\n', names=["x"], values=["a"])  # already there
    with pytest.raises(AssertionError):
        unchanged("list_insert", 'x = ["a"]\n', "already", names=["x"], values=["b"])  # would change
    assert hunks("a\nb\nc\n", "a\nB\nc\n") == [(2, "b\n", "B\n")]
    assert hunks("a\r\n", "a\n") == [(1, "a\r\n", "a\n")]


# ------------------------------------------------------------------------- set_value


class TestSetValue:
    def test_value_and_expr_together_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="exactly one of `value` or `expr`"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": 1, "expr": "1"}})


# ------------------------------------------------------------------- nested scopes

SCOPES = code('''
    supported = ["llama"]
    limits = {"llama": 1}
    timeout = 10
    build(model, strict=False)


    class SpeculativeConfig:
        supported = ["llama"]
        limits = {"llama": 1}
        timeout = 10

        def _verify_args(self):
            supported = ["llama", "qwen"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)

        def other(self):
            supported = ["llama"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)


    class DraftConfig:
        def _verify_args(self):
            supported = ["llama", "qwen"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)
''')

WITHIN = "SpeculativeConfig._verify_args"


class TestOnlyTheWithinScopeChanges:
    def test_list_insert(self) -> None:
        after = changed("list_insert", SCOPES, names=["supported"], values=["kimi_k2"], within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (13, '        supported = ["llama", "qwen"]\n', '        supported = ["llama", "qwen", "kimi_k2"]\n'),
        ]

    def test_list_remove(self) -> None:
        after = changed("list_remove", SCOPES, names=["supported"], values=["qwen"], within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (13, '        supported = ["llama", "qwen"]\n', '        supported = ["llama"]\n'),
        ]

    def test_set_value(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, within=WITHIN).source
        assert hunks(SCOPES, after) == [(15, "        timeout = 10\n", "        timeout = 60\n")]

    def test_dict_set(self) -> None:
        after = changed("dict_set", SCOPES, names=["limits"], key="kimi_k2", value=2, within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (14, '        limits = {"llama": 1}\n', '        limits = {"llama": 1, "kimi_k2": 2}\n'),
        ]

    def test_call_kwarg(self) -> None:
        after = changed("call_kwarg", SCOPES, callee="build", keyword="strict", value=True, within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (16, "        build(model, strict=False)\n", "        build(model, strict=True)\n"),
        ]

    def test_class_scope_is_the_class_body_only(self) -> None:
        result = changed("set_value", SCOPES, names=["timeout"], value=60, within="SpeculativeConfig")
        assert hunks(SCOPES, result.source) == [(10, "    timeout = 10\n", "    timeout = 60\n")]
        assert result.message == "set timeout = 60 (was 10) in SpeculativeConfig"

    def test_nested_takes_its_methods_too_but_not_other_classes(self) -> None:
        result = changed("set_value", SCOPES, names=["timeout"], value=60, within="SpeculativeConfig",
                         nested=True, all=True)
        assert hunks(SCOPES, result.source) == [
            (10, "    timeout = 10\n", "    timeout = 60\n"),
            (15, "        timeout = 10\n", "        timeout = 60\n"),
            (21, "        timeout = 10\n", "        timeout = 60\n"),
        ]
        assert result.message == (
            "set timeout = 60 (was 10) in SpeculativeConfig; "
            "set timeout = 60 (was 10) in SpeculativeConfig._verify_args; "
            "set timeout = 60 (was 10) in SpeculativeConfig.other (3 of 3 places changed (all: true))"
        )

    def test_no_within_means_the_whole_file(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, all=True).source
        assert [line for line, _, _ in hunks(SCOPES, after)] == [3, 10, 15, 21, 29]

    def test_module_scope_is_the_top_level_only(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, within="<module>").source
        assert hunks(SCOPES, after) == [(3, "timeout = 10\n", "timeout = 60\n")]


# ------------------------------------------------------- untouched code elsewhere

MODULE = code('''
    # -*- coding: utf-8 -*-
    """A module with formatting nobody would choose twice."""
    from typing import (
        Any,   Optional ,  # odd spacing
    )
    x=1;y  =  ( 2 )
    names = [ 'a' ,"b" ]   # mixed quotes, odd spacing
    long = "one" \\
        "two"
    _table = {
        1:'x',
            2 : "y",   # over-indented
    }


    class SpeculativeConfig:

        def _verify_args(self) -> None:
            # Eagle3 targets
            eagle3_target_supported = [
                "llama",
                "qwen",  # since 0.10
                "afmoe",
            ]
            if self.method == "eagle3" and \\
                    self.model not in eagle3_target_supported:
                raise ValueError( f"no {self.model!r}" )
            self.timeout  = 10
            self.build( model , strict = False )   # trailing
            return  None
    # a comment at the end, no blank line before it
''')


class TestUntouchedCodeIsByteIdentical:
    def test_list_insert_after_an_anchor(self) -> None:
        after = insert(MODULE, ["kimi_k2", "deepseek_v3"], names=["eagle3_target_supported"], within=WITHIN,
                       after="afmoe")
        assert hunks(MODULE, after) == [(24, "", '            "kimi_k2",\n            "deepseek_v3",\n')]

    def test_list_insert_after_an_anchor_in_the_middle(self) -> None:
        after = insert(MODULE, ["kimi_k2"], names=["eagle3_target_supported"], within=WITHIN, after="llama")
        assert hunks(MODULE, after) == [(22, "", '            "kimi_k2",\n')]

    def test_list_remove(self) -> None:
        after = remove(MODULE, ["qwen"], names=["eagle3_target_supported"])
        assert hunks(MODULE, after) == [(22, '            "qwen",  # since 0.10\n', "")]

    def test_set_value(self) -> None:
        after = set_value(MODULE, names=["self.timeout"], value=60)
        assert hunks(MODULE, after) == [(28, "        self.timeout  = 10\n", "        self.timeout  = 60\n")]

    def test_dict_set(self) -> None:
        after = dict_set(MODULE, 2, names=["_table"], value="z")
        assert hunks(MODULE, after) == [
            (12, '        2 : "y",   # over-indented\n', '        2 : "z",   # over-indented\n'),
        ]

    def test_call_kwarg(self) -> None:
        after = kwarg(MODULE, "strict", "self.build", value=True)
        assert hunks(MODULE, after) == [
            (29, "        self.build( model , strict = False )   # trailing\n",
             "        self.build( model , strict = True )   # trailing\n"),
        ]


# ------------------------------------------------------------------ the registry


def test_the_registry_builds_edit() -> None:
    """`OPS` is the one list: the kinds table and Edit's fields come from it, in its order."""
    assert list(EDIT_KINDS) == [op.kind for op in OPS]
    assert list(Edit.model_fields) == list(EDIT_KINDS)
    assert all(Edit.model_fields[kind].annotation == (op | None) for kind, op in EDIT_KINDS.items())


# ------------------------------------------------------------ not_found messages

VERIFY_ARGS = code('''
    class SpeculativeConfig:
        def _verify_args(self):
            aux_hidden_states_supported = ["llama", "qwen"]
            max_len = 8
            if self.method == "eagle3":
                check(self.model, aux_hidden_states_supported)
''')


class TestNotFoundMessages:
    def test_either_name_is_accepted(self) -> None:
        after = insert(VERIFY_ARGS, ["kimi_k2"], names=["eagle3_target_supported", "aux_hidden_states_supported"],
                       within=WITHIN)
        assert hunks(VERIFY_ARGS, after) == [
            (3, '        aux_hidden_states_supported = ["llama", "qwen"]\n',
             '        aux_hidden_states_supported = ["llama", "qwen", "kimi_k2"]\n'),
        ]


# ------------------------------------------------------------------------ codemod

# The transformers the codemod cases run (tests/unit/edit_cases/codemod), for the tests below too.
TRANSFORMERS = (Path(__file__).resolve().parent / "edit_cases" / "codemod" / "transformers.py").read_text()


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    """A recipe folder holding the user's codemod file; the recipe lives one level down."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "mods.py").write_text(TRANSFORMERS)
    return folder


def codemod(recipe_dir: Path, **params: Any) -> Edit:
    edit = Edit.model_validate({"codemod": params})
    edit.codemod.bind(recipe_dir)
    return edit


class TestCodemod:
    def test_file_in_a_subfolder_is_allowed(self, recipe_dir: Path) -> None:
        (recipe_dir / "codemods").mkdir()
        (recipe_dir / "codemods" / "rename.py").write_text(TRANSFORMERS)
        edit = codemod(recipe_dir, file="codemods/rename.py", transformer="RenameName", args={"old": "a", "new": "b"})
        assert edit.apply("a\n").source == "b\n"

    @pytest.mark.parametrize("path", ["../escape.py", "codemods/../../escape.py"])
    def test_path_outside_the_recipe_folder_is_refused(self, recipe_dir: Path, path: str) -> None:
        (recipe_dir.parent / "escape.py").write_text(TRANSFORMERS)  # exists, and still refused
        edit = codemod(recipe_dir, file=path, transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_absolute_path_outside_the_recipe_folder_is_refused(self, recipe_dir: Path) -> None:
        outside = recipe_dir.parent / "escape.py"
        outside.write_text(TRANSFORMERS)
        edit = codemod(recipe_dir, file=str(outside), transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_symlink_leading_outside_the_recipe_folder_is_refused(self, recipe_dir: Path) -> None:
        outside = recipe_dir.parent / "escape.py"
        outside.write_text(TRANSFORMERS)
        (recipe_dir / "link.py").symlink_to(outside)
        edit = codemod(recipe_dir, file="link.py", transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_missing_file(self, recipe_dir: Path) -> None:
        with pytest.raises(EditError, match=r"missing\.py does not exist"):
            codemod(recipe_dir, file="missing.py", transformer="RenameName").apply("a\n")

    @pytest.mark.parametrize("name", ["Nope", "NOT_A_TRANSFORMER"])
    def test_missing_or_wrong_class(self, recipe_dir: Path, name: str) -> None:
        with pytest.raises(EditError, match=f"no libcst CSTTransformer or Codemod class named {name}"):
            codemod(recipe_dir, file="mods.py", transformer=name).apply("a\n")

    def test_file_that_fails_to_import(self, recipe_dir: Path) -> None:
        (recipe_dir / "broken.py").write_text("import libcst\nraise ImportError('no such thing')\n")
        with pytest.raises(EditError, match=r"broken\.py failed to load: ImportError: no such thing"):
            codemod(recipe_dir, file="broken.py", transformer="X").apply("a\n")

    def test_transformer_that_crashes(self, recipe_dir: Path) -> None:
        with pytest.raises(EditError, match=r"codemod Crash failed: RuntimeError: kaboom"):
            codemod(recipe_dir, file="mods.py", transformer="Crash").apply("a\n")

    def test_wrong_args(self, recipe_dir: Path) -> None:
        edit = codemod(recipe_dir, file="mods.py", transformer="RenameName", args={"old": "a"})
        with pytest.raises(EditError, match=r"codemod RenameName failed: TypeError"):
            edit.apply("a\n")


# ------------------------------------------------------------ the edit envelope


class TestEditEnvelope:
    def test_exactly_one_operation(self) -> None:
        with pytest.raises(ValidationError, match="give exactly one edit operation"):
            Edit.model_validate({
                "list_insert": {"names": ["x"], "values": ["a"]},
                "list_remove": {"names": ["x"], "values": ["b"]},
            })
        with pytest.raises(ValidationError, match="give exactly one edit operation"):
            Edit.model_validate({})

    def test_unknown_parameter_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="within_scope"):
            Edit.model_validate({"list_insert": {"names": ["x"], "values": ["a"], "within_scope": "C"}})

    def test_kind_and_op(self) -> None:
        edit = Edit.model_validate({"dict_set": {"names": ["d"], "key": "a", "value": 1}})
        assert edit.kind == "dict_set"
        assert type(edit.op).__name__ == "DictSet"

    def test_source_that_does_not_parse(self) -> None:
        with pytest.raises(EditError, match="the file does not parse"):
            run("list_insert", "x = [\n", names=["x"], values=["a"])

    @pytest.mark.parametrize("kind, params", [
        ("set_value", {"names": ["x"]}),
        ("dict_set", {"names": ["d"], "key": "a"}),
        ("call_kwarg", {"callee": "f", "keyword": "k"}),
    ])
    def test_expr_that_does_not_parse_is_a_recipe_error(self, kind: str, params: dict[str, Any]) -> None:
        # Refused when the recipe is read, not reported later as a target that is "not found".
        with pytest.raises(ValidationError, match=r"expr '1 \+' is not a Python expression"):
            Edit.model_validate({kind: {**params, "expr": "1 +"}})


# ---------------------------------------------------- a changed result is always Python


class TestResultsCompile:
    def test_a_keyword_joining_a_bare_generator_parenthesizes_it(self) -> None:
        result = assert_edit("call_kwarg", "t = sum(x for x in y)\n", "t = sum((x for x in y), pk=1)\n", callee="sum", keyword="pk", value=1)
        compile(result.source, "t.py", "exec")

    def test_an_edit_that_would_not_compile_is_a_patchkit_bug_not_a_result(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import patchkit.edits.ops.call_kwarg.engine as engine

        monkeypatch.setattr(engine, "run", lambda *args: EditResult("changed", "f(x for x in y, k=1)\n", "added"))
        with pytest.raises(EditBug, match=r"^patchkit bug: the call_kwarg edit produced Python that does not compile "
                                          r"\(Generator expression must be parenthesized, line 1: `f\(x for x in y, k=1\)`\)"):
            run("call_kwarg", "f(x for x in y)\n", callee="f", keyword="k", value=1)

    def test_a_bug_reaches_the_patch_step_as_a_failure_naming_it(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        import patchkit.edits.ops.list_insert.engine as engine
        from patchkit.recipe.model import load_recipe
        from patchkit.run.steps import edit_cache

        monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
        monkeypatch.setattr(engine, "run", lambda *args: EditResult("changed", "x = [\n", "added"))
        step = next(s for s in load_recipe(Path(__file__).parents[2] / "recipes" / "kimi_eagle3.yaml").recipe.steps
                    if s.name == "eagle3-whitelist")
        result = edit_cache.compute(step.patch, "x = []\n")
        assert result.verdict == "not_found" and result.message.startswith("patchkit bug: the list_insert edit")
        assert edit_cache.load(step.patch, "x = []\n") is None  # never cached


# ------------------------------------------------------------------ duplicate keys


class TestDuplicateKeys:
    def test_the_last_of_duplicate_keys_is_edited_and_the_message_says_so(self) -> None:
        import ast

        result = assert_edit("dict_set", "d = {'a': 1, 'b': 2, 'a': 3}\n", "d = {'a': 1, 'b': 2, 'a': 9}\n", names=["d"], key="a", value=9)
        assert result.message == "set key 'a' to 9 (the last of its 2 entries: Python keeps the last)"
        assert ast.literal_eval(result.source.split(" = ")[1])["a"] == 9


# ------------------------------------------------------- empty multi-line displays


class TestEmptyMultiLineDisplays:
    def test_emptying_and_refilling_gives_the_original_back(self) -> None:
        original = code('''
            class A:
                x = [  # models we accept
                    "a",
                    # more models go here
                ]
        ''')
        emptied = remove(original, ["a"])
        assert emptied == code('''
            class A:
                x = [  # models we accept
                    # more models go here
                ]
        ''')
        assert insert(emptied, ["a"]) == original


def test_a_codemod_that_writes_invalid_python_is_the_codemods_error(recipe_dir: Path) -> None:
    (recipe_dir / "bad.py").write_text(
        "import libcst as cst\n\n"
        "class Break(cst.CSTTransformer):\n"
        "    def leave_Module(self, original, updated):\n"
        "        return updated.with_changes(body=[*updated.body, cst.parse_statement('return 1\\n')])\n"
    )
    with pytest.raises(EditError, match=r"^codemod Break produced Python that does not compile \('return' outside "
                                        r"function, line 2: `return 1`\); nothing was changed$") as caught:
        codemod(recipe_dir, file="bad.py", transformer="Break").apply("x = 1\n")
    assert not isinstance(caught.value, EditBug)


# ------------------------------------------------------- found by the property tier


class TestFoundOnRealFiles:
    def test_a_parenthesized_sum_is_looked_through(self) -> None:
        # vllm 0.32.0 embedding_gemma2.py: token_ids = (\n [a]\n + [b] * n\n + [c]\n).
        source = code('''
            token_ids = (
                [config.boa_token_id]
                + [processor.audio_token_id] * num_tokens
                + [config.eoa_token_index]
            )
        ''')
        after = insert(source, [7], names=["token_ids"])
        assert after == source.replace("[config.eoa_token_index]", "[config.eoa_token_index, 7]")
