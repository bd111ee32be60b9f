"""Edits that are easy to get wrong without a word: a literal replaced by one of another type
(`value: no` where the code has a bool), a target that only a type checker reads
(`if TYPE_CHECKING:`), a file read or written in the wrong encoding, a byte order mark lost.

Each case here was a hand probe of an outside review.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from patchkit.edits import Edit, EditError, EditResult
from patchkit.edits.encoding import decode_source, encode_source
from patchkit.edits.testing import assert_idempotent, assert_refused
from tests.helpers import tree_walk


def run(kind: str, source: str, **params: Any) -> EditResult:
    return Edit.model_validate({kind: params}).apply(source)


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


SAMPLING = code('''
    class SamplingParams:
        def __init__(self, detokenize: bool = True, n: int = 1) -> None:
            self.detokenize = detokenize
''')
DETOKENIZE = {"target": "default", "within": "SamplingParams.__init__", "arg": "detokenize"}


# ----------------------------------------------------------------------- type traps


class TestBoolWords:
    def test_no_for_a_bool_is_refused_in_one_line_that_says_what_was_meant(self) -> None:
        result = run("set_value", SAMPLING, **DETOKENIZE, value="no")
        assert (result.verdict, result.refused, result.source) == ("not_found", True, SAMPLING)
        assert result.message == ('set_value detokenize: value "no" is a string where the code has a bool; '
                                  "did you mean false? (say type: str to keep the string)")

    @pytest.mark.parametrize(("word", "meant"), [
        ("yes", "true"), ("no", "false"), ("on", "true"), ("off", "false"), ("true", "true"),
        ("false", "false"), ("NO", "false"), ("Off", "false"), ("True", "true"), ("YES", "true")])
    def test_every_yaml_1_1_bool_word_in_any_case(self, word: str, meant: str) -> None:
        result = run("set_value", "ENABLED = False\n", names=["ENABLED"], value=word)
        assert result.refused and result.verdict == "not_found"
        assert f'value "{word}" is a string where the code has a bool; did you mean {meant}?' in result.message

    def test_type_str_keeps_the_string_without_a_warning(self) -> None:
        result = assert_idempotent("set_value", SAMPLING, **DETOKENIZE, value="no", type="str")
        assert 'detokenize: bool = "no"' in result.source
        assert "warning" not in result.message

    def test_dict_set_and_call_kwarg_are_refused_too(self) -> None:
        refused = run("dict_set", "FLAGS = {'fast': True}\n", names=["FLAGS"], key="fast", value="off")
        assert refused.refused
        assert refused.message.startswith('dict_set key \'fast\': value "off" is a string where the code has a bool')
        kwarg = run("call_kwarg", "engine = Engine(eager=False)\n", callee="Engine", keyword="eager", value="yes")
        assert kwarg.refused
        assert kwarg.message.startswith('call_kwarg eager: value "yes" is a string where the code has a bool; '
                                        "did you mean true?")

    def test_inside_a_value_by_path(self) -> None:
        result = run("set_value", "CFG = {'debug': False}\n", names=["CFG"], path=["debug"], value="on")
        assert result.refused
        assert result.message.startswith("set_value CFG['debug']: value \"on\"")

    def test_other_strings_and_exprs_only_warn(self) -> None:
        other = assert_idempotent("set_value", "ENABLED = True\n", names=["ENABLED"], value="auto")
        assert other.message.endswith("(warning: the code has a bool there, the new value is a string: "
                                      "say type: str if that is meant)")
        quoted = assert_idempotent("set_value", "ENABLED = True\n", names=["ENABLED"], expr="'no'")
        assert "(warning: the code has a bool there, the new value is a string" in quoted.message

    def test_a_place_not_chosen_refuses_nothing(self) -> None:
        source = "MODE = True\nMODE = 'fast'\n"
        result = assert_idempotent("set_value", source, names=["MODE"], occurrence=2, value="no")
        assert result.source == "MODE = True\nMODE = 'no'\n"
        every = run("set_value", source, names=["MODE"], all=True, value="no")
        assert every.refused and every.source == source

    def test_only_where_the_code_has_a_bool(self) -> None:
        assert run("set_value", "MODE = 'no'\n", names=["MODE"], value="no").verdict == "already"
        assert "warning" not in assert_idempotent("set_value", "MODE = 'yes'\n", names=["MODE"], value="no").message
        assert run("set_value", "MODE = False\n", names=["MODE"], value="no").refused


class TestTypeChangeWarnings:
    @pytest.mark.parametrize(("before", "value", "was", "now", "suggest"), [
        ("X = True\n", "auto", "a bool", "a string", "str"),
        ("X = 8\n", "8", "an int", "a string", "str"),
        ("X = 0.5\n", True, "a float", "a bool", "bool"),
        ("X = 8\n", False, "an int", "a bool", "bool"),
        ("X = 'fast'\n", 3, "a string", "an int", "int"),
        ("X = None\n", 4096, "None", "an int", "int"),
        ("X = 4096\n", None, "an int", "None", "None"),
        ("X = ('a', 'b')\n", ["a", "b"], "a tuple", "a list", "list"),
    ])
    def test_a_literal_of_another_type_warns(self, before: str, value: Any, was: str, now: str, suggest: str) -> None:
        result = assert_idempotent("set_value", before, names=["X"], value=value)
        assert result.message.endswith(f"(warning: the code has {was} there, the new value is {now}: "
                                       f"say type: {suggest} if that is meant)")
        silenced = assert_idempotent("set_value", before, names=["X"], value=value, type=suggest)
        assert "warning" not in silenced.message
        assert silenced.source == result.source

    @pytest.mark.parametrize(("before", "quiet", "warns"), [
        ("X = 1\n", {"value": 1.5}, {"value": "1.5"}),  # a number stays a number
        ("X = 1.5\n", {"value": 2}, {"value": False}),
        ("X = 'a'\n", {"value": "b"}, {"value": 2}),
        ("X = compute()\n", {"value": "b"}, None),  # what the code has is not a literal: its type is not known
        ("X = True\n", {"expr": "os.environ.get('X')"}, {"expr": "'X'"}),
        ("X = [1]\n", {"value": [1, 2]}, {"value": {"a": 1}}),
    ])
    def test_same_kind_or_unknown_says_nothing(self, before: str, quiet: dict[str, Any],
                                               warns: dict[str, Any] | None) -> None:
        assert "warning" not in assert_idempotent("set_value", before, names=["X"], **quiet).message
        if warns is None:  # no literal to compare with, whatever the new value
            warns, before = {"value": 2}, "X = 'a'\n"
        assert "(warning: the code has" in assert_idempotent("set_value", before, names=["X"], **warns).message

    def test_the_warning_follows_the_scope(self) -> None:
        source = code('''
            class C:
                def f(self):
                    self.fast = True
        ''')
        result = assert_idempotent("set_value", source, names=["self.fast"], value="auto")
        assert result.message == ("set self.fast = 'auto' (was True) in C.f (warning: the code has a bool there, "
                                  "the new value is a string: say type: str if that is meant)")

    def test_dict_set_and_call_kwarg_warn(self) -> None:
        dict_set = assert_idempotent("dict_set", "D = {'n': 1}\n", names=["D"], key="n", value="1")
        assert "(warning: the code has an int there, the new value is a string" in dict_set.message
        kwarg = assert_idempotent("call_kwarg", "f(n=None)\n", callee="f", keyword="n", value=2)
        assert "(warning: the code has None there, the new value is an int" in kwarg.message
        added = assert_idempotent("call_kwarg", "f()\n", callee="f", keyword="n", value="x")
        assert "warning" not in added.message  # nothing replaced

    def test_type_must_be_the_values_own(self) -> None:
        with pytest.raises(ValidationError, match=r"value 1 is an int, not a float as `type: float` says \(write 1.0\)"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": 1, "type": "float"}})
        with pytest.raises(ValidationError, match="value 'no' is a string, not a bool as `type: bool` says"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": "no", "type": "bool"}})
        with pytest.raises(ValidationError, match=r"expr '\(1, 2\)' is a tuple, not a list"):
            Edit.model_validate({"set_value": {"names": ["x"], "expr": "(1, 2)", "type": "list"}})
        with pytest.raises(ValidationError, match="type"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": "no", "type": "string"}})
        Edit.model_validate({"set_value": {"names": ["x"], "expr": "os.environ['A']", "type": "str"}})

    def test_the_json_schema_has_type(self) -> None:
        schema = Edit.model_json_schema()
        for op in ("SetValue", "DictSet", "CallKwarg"):
            field = schema["$defs"][op]["properties"]["type"]
            choices = next(c for c in field["anyOf"] if "enum" in c)["enum"]
            assert {"str", "int", "float", "bool", "None"} <= set(choices)


# ------------------------------------------------------------------- dead branches


NO_EFFECT = "which never runs: the edit has no effect at run time)"


@pytest.fixture(params=[True, False], ids=["pruned", "whole-walk"])
def route(request: pytest.FixtureRequest) -> Any:
    """Both ways a pass walks the tree: only the statements holding a target's words, and all."""
    with tree_walk(request.param):
        yield request.param


class TestDeadBranches:
    @pytest.mark.parametrize(("source", "branch"), [
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    LIMIT = 1\n", "`if TYPE_CHECKING:`"),
        ("import typing\nif typing.TYPE_CHECKING:\n    LIMIT = 1\n", "`if typing.TYPE_CHECKING:`"),
        ("if False:\n    LIMIT = 1\n", "`if False:`"),
        ("if not TYPE_CHECKING:\n    pass\nelse:\n    LIMIT = 1\n", "the `else:` of `if not TYPE_CHECKING:`"),
        ("if TYPE_CHECKING:\n    class C:\n        def f(self):\n            LIMIT = 1\n", "`if TYPE_CHECKING:`"),
        ("if TYPE_CHECKING:\n    pass\nelif False:\n    LIMIT = 1\n", "`if False:`"),
    ])
    def test_a_target_only_under_a_branch_that_never_runs_warns(self, source: str, branch: str, route: bool) -> None:
        result = assert_idempotent("set_value", source, names=["LIMIT"], value=2)
        assert result.message.endswith(f"(warning: it sits under {branch}, {NO_EFFECT}")

    @pytest.mark.parametrize(("runs", "never"), [
        ("if TYPE_CHECKING:\n    pass\nelse:\n    LIMIT = 1\n", "if TYPE_CHECKING:\n    LIMIT = 1\nelse:\n    pass\n"),
        ("if TYPE_CHECKING:\n    pass\nelif sys.platform == 'linux':\n    LIMIT = 1\n",
         "if sys.platform == 'linux':\n    pass\nelif TYPE_CHECKING:\n    LIMIT = 1\n"),
        ("if not TYPE_CHECKING:\n    LIMIT = 1\n", "if not TYPE_CHECKING:\n    pass\nelse:\n    LIMIT = 1\n"),
        ("if DEBUG:\n    LIMIT = 1\n", "if False:\n    LIMIT = 1\n"),
        ("if True:\n    LIMIT = 1\n", "if True:\n    pass\nelse:\n    LIMIT = 1\n"),
    ])
    def test_a_branch_that_runs_says_nothing(self, runs: str, never: str) -> None:
        assert "warning" not in assert_idempotent("set_value", runs, names=["LIMIT"], value=2).message
        assert NO_EFFECT in assert_idempotent("set_value", never, names=["LIMIT"], value=2).message

    def test_only_when_every_target_is_dead(self) -> None:
        source = "if TYPE_CHECKING:\n    LIMIT = 1\nelse:\n    LIMIT = 1\n"
        both = assert_idempotent("set_value", source, names=["LIMIT"], all=True, value=2)
        assert "warning" not in both.message
        dead = assert_idempotent("set_value", source, names=["LIMIT"], occurrence=1, value=2)
        assert dead.message.endswith(f"(warning: it sits under `if TYPE_CHECKING:`, {NO_EFFECT}")

    def test_every_op_that_finds_a_place(self, route: bool) -> None:
        under = "if TYPE_CHECKING:\n"
        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("list_insert", under + "    L = [1]\n", {"names": ["L"], "values": [2]}),
            ("list_remove", under + "    L = [1, 2]\n", {"names": ["L"], "values": [2]}),
            ("dict_set", under + "    D = {}\n", {"names": ["D"], "key": "k", "value": 1}),
            ("call_kwarg", under + "    f()\n", {"callee": "f", "keyword": "k", "value": 1}),
            ("set_value", under + "    def f(k=1): pass\n", {"target": "default", "within": "f", "arg": "k", "value": 2}),
            ("replace_function", under + "    def f():\n        return 1\n", {"function": "f", "body": "return 2"}),
        ]
        for kind, source, params in cases:
            message = assert_idempotent(kind, source, **params).message
            assert message.endswith(f"(warning: it sits under `if TYPE_CHECKING:`, {NO_EFFECT}"), (kind, message)


# ---------------------------------------------------------------- byte order mark

BOM = "\ufeff"


class TestByteOrderMark:
    @pytest.mark.parametrize(("kind", "before", "after", "params"), [
        ("set_value", "X = 1\n", "X = 2\n", {"names": ["X"], "value": 2}),
        ("list_insert", "L = ['a']\n", "L = ['a', 'b']\n", {"names": ["L"], "values": ["b"]}),
        ("replace_function", "def f():\n    return 1\n", "def f():\n    return 2\n", {"function": "f", "body": "return 2"}),
    ])
    def test_the_edits_api_keeps_it(self, kind: str, before: str, after: str, params: dict[str, Any]) -> None:
        result = assert_idempotent(kind, BOM + before, **params)
        assert result.source == BOM + after

    def test_a_diff_keeps_it_and_a_refusal_gives_the_source_back(self) -> None:
        old, new = "X = 1\nY = 2\n", "X = 1\nY = 3\n"
        diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/pkg/m.py", "b/pkg/m.py"))
        result = Edit.model_validate({"diff": {"text": diff}}).apply(BOM + old)
        assert (result.verdict, result.source) == ("changed", BOM + new)
        assert assert_refused("set_value", BOM + old, names=["Z"], value=2) == "no assignment to Z"


# ------------------------------------------------------------------------ encodings

LATIN1 = b"# -*- coding: latin-1 -*-\nNAME = 'plain'\n"


class TestEncodings:
    def test_a_declared_encoding_is_read_and_written(self) -> None:
        text = decode_source(b"# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\n")
        assert text == "# -*- coding: latin-1 -*-\nNAME = 'café'\n"
        new = run("set_value", text, names=["NAME"], value="naïve").source
        assert encode_source(new) == b"# -*- coding: latin-1 -*-\nNAME = 'na\xefve'\n"

    def test_the_interpreter_reads_what_the_edit_wrote(self, tmp_path: Path) -> None:
        new = run("set_value", decode_source(LATIN1), names=["NAME"], value="naïve").source
        module = tmp_path / "latin.py"
        module.write_bytes(encode_source(new))
        shown = subprocess.run([sys.executable, "-c", "import latin; print(ascii(latin.NAME))"], cwd=tmp_path,
                               capture_output=True, text=True, check=True)
        assert shown.stdout.strip() == ascii("naïve")

    def test_a_character_the_encoding_cannot_hold_is_refused_naming_it(self) -> None:
        new = run("set_value", decode_source(LATIN1), names=["NAME"], value="œuvre").source
        with pytest.raises(EditError) as refused:
            encode_source(new)
        assert str(refused.value) == ("'œ' (U+0153, line 2) cannot be written in latin-1, the encoding the file "
                                      "declares; nothing changed")

    @pytest.mark.parametrize("data", [
        b"x = 1\r\n",
        "x = 'é'\n".encode(),
        "\ufeffx = 'é'\n".encode(),
        b"#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\nx = '\xe9'\n",
        b"# coding=cp1252\nx = '\x80'\n",
    ])
    def test_bytes_come_back_as_they_were(self, data: bytes) -> None:
        assert encode_source(decode_source(data)) == data

    def test_a_declaration_on_line_two_counts_only_after_a_comment(self) -> None:
        data = b"x = 1\n# coding: latin-1\ny = '\xe9'\n"  # Python reads this as UTF-8
        with pytest.raises(EditError, match=r"the file is not UTF-8 text \(byte 0xe9 at offset 29\)"):
            decode_source(data)
        with pytest.raises(EditError, match=r"cannot be written in UTF-8, Python's when a file declares none"):
            encode_source("x = 1\n# coding: latin-1\ny = '\udce9'\n")

    @pytest.mark.parametrize(("data", "problem"), [
        (b"# coding: bogus\nx = 1\n", "the file's encoding declaration is not one Python reads (unknown encoding: bogus)"),
        (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "the file starts with a UTF-8 byte order mark but declares another"),
        (b"x = '\xe9'\n", "the file is not UTF-8 text (byte 0xe9 at offset 5)"),
    ])
    def test_a_file_python_cannot_read_is_named(self, data: bytes, problem: str) -> None:
        with pytest.raises(EditError) as error:
            decode_source(data)
        assert str(error.value).startswith(problem)

    def test_the_new_text_declares_its_encoding(self) -> None:
        # an edit that changes the declaration: written as the new file says it is
        assert encode_source("# coding: latin-1\nx = 'é'\n") == b"# coding: latin-1\nx = '\xe9'\n"
        assert encode_source("# coding: utf-8\nx = 'é'\n") == "# coding: utf-8\nx = 'é'\n".encode()
