"""Golden tests for the replace_function edit: exact source in, exact source out.

`changed` applies twice: the first apply must change the source, the second must find
the body in place ("already") and leave the source identical, so every golden test is
also an idempotency test.
"""

from __future__ import annotations

import difflib
import textwrap
from typing import Any

import pytest
from pydantic import ValidationError

from patchkit.edits import EDIT_KINDS, Edit, EditResult

# --------------------------------------------------------------------------- helpers


def code(text: str) -> str:
    """A source file written inline: dedented, without the leading newline."""
    return textwrap.dedent(text).lstrip("\n")


def run(source: str, function: str, body: str, **params: Any) -> EditResult:
    return Edit.model_validate({"replace_function": {"function": function, "body": body, **params}}).apply(source)


def changed(source: str, function: str, body: str, **params: Any) -> EditResult:
    first = run(source, function, body, **params)
    assert first.verdict == "changed", first.message
    assert first.source != source
    second = run(first.source, function, body, **params)
    assert (second.verdict, second.message) == ("already", "already in place"), f"not idempotent:\n{first.source}"
    assert second.source == first.source
    return first


def replaced(source: str, function: str, body: str, **params: Any) -> str:
    return changed(source, function, body, **params).source


def unchanged(source: str, verdict: str, function: str, body: str, **params: Any) -> EditResult:
    result = run(source, function, body, **params)
    assert result.verdict == verdict, result.message
    assert result.source == source
    return result


def hunks(before: str, after: str) -> list[tuple[int, str, str]]:
    """(first line number, old lines, new lines) for each run of differing lines."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [(i1 + 1, "".join(a[i1:i2]), "".join(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


NEW_BODY = code('''
    total = 0
    for value in values:
        total += value
    return total
''')

# ------------------------------------------------------------------------- registry


def test_registered_as_replace_function() -> None:
    assert "replace_function" in EDIT_KINDS
    edit = Edit.model_validate({"replace_function": {"function": "f", "body": "pass"}})
    assert edit.kind == "replace_function"
    assert edit.op.keep_docstring is True


# ---------------------------------------------------------------------------- where


class TestWhere:
    def test_module_function(self) -> None:
        before = code('''
            import math


            def f(values):
                return sum(values)


            x = f([1])
        ''')
        result = changed(before, "f", NEW_BODY)
        assert result.source == code('''
            import math


            def f(values):
                total = 0
                for value in values:
                    total += value
                return total


            x = f([1])
        ''')
        assert result.message == "replaced the body of function f (1 -> 4 lines)"

    def test_method(self) -> None:
        before = code('''
            class C:
                def f(self, values):
                    return sum(values)

                def g(self):
                    return 1
        ''')
        assert replaced(before, "C.f", NEW_BODY) == code('''
            class C:
                def f(self, values):
                    total = 0
                    for value in values:
                        total += value
                    return total

                def g(self):
                    return 1
        ''')

    def test_a_method_is_not_matched_by_its_bare_name(self) -> None:
        source = "class C:\n    def f(self):\n        return 1\n"
        result = unchanged(source, "not_found", "f", "return 2")
        assert result.message == "no function f; did you mean C.f?"

    def test_nested_function(self) -> None:
        before = code('''
            def outer():
                def inner(values):
                    return sum(values)
                return inner
        ''')
        assert replaced(before, "outer.inner", NEW_BODY) == code('''
            def outer():
                def inner(values):
                    total = 0
                    for value in values:
                        total += value
                    return total
                return inner
        ''')

    def test_method_of_a_class_inside_a_function(self) -> None:
        before = code('''
            def factory():
                class Impl:
                    def run(self):
                        return 1
                return Impl
        ''')
        assert replaced(before, "factory.Impl.run", "return 2") == code('''
            def factory():
                class Impl:
                    def run(self):
                        return 2
                return Impl
        ''')

    def test_same_name_elsewhere_is_untouched(self) -> None:
        before = code('''
            def f():
                return 1


            class C:
                def f(self):
                    return 1
        ''')
        assert replaced(before, "C.f", "return 2") == code('''
            def f():
                return 1


            class C:
                def f(self):
                    return 2
        ''')

    def test_async_def(self) -> None:
        before = code('''
            class Client:
                async def fetch(self, url):
                    return await self.session.get(url)
        ''')
        result = changed(before, "Client.fetch", code('''
            async with self.session.get(url, timeout=5) as response:
                return await response.text()
        '''))
        assert result.source == code('''
            class Client:
                async def fetch(self, url):
                    async with self.session.get(url, timeout=5) as response:
                        return await response.text()
        ''')
        assert result.message == "replaced the body of async function Client.fetch (1 -> 2 lines)"


# ------------------------------------------------------------- what stays identical


class TestOnlyTheBodyChanges:
    def test_decorators_signature_and_comments_above_are_byte_identical(self) -> None:
        before = code('''
            # -*- coding: utf-8 -*-
            import functools


            # The CPU fallback for the Triton kernel.
            # (second comment line)
            @functools.lru_cache(maxsize = None)   # odd spacing
            @staticmethod
            def f(
                a,   # first
                b: int=2,
            ) -> int:  # type: ignore[misc]
                # old comment
                return a+b
                # old trailing comment


            # above g
            def g():
                return 3
        ''')
        after = replaced(before, "f", "return a * b\n")
        assert hunks(before, after) == [
            (13, "    # old comment\n    return a+b\n    # old trailing comment\n", "    return a * b\n"),
        ]

    def test_one_line_def_becomes_a_block(self) -> None:
        before = "def f(): return 1  # one-liner\nx = 2\n"
        assert replaced(before, "f", "y = 1\nreturn y\n") == "def f():  # one-liner\n    y = 1\n    return y\nx = 2\n"

    def test_last_function_of_the_file(self) -> None:
        before = "def f():\n    return 1\n"
        assert replaced(before, "f", "return 2") == "def f():\n    return 2\n"

    def test_crlf_line_endings_are_kept(self) -> None:
        before = "def f():\r\n    return 1\r\n\r\n\r\nx = 1\r\n"
        after = replaced(before, "f", "y = 2\nreturn y\n")
        assert after == "def f():\r\n    y = 2\r\n    return y\r\n\r\n\r\nx = 1\r\n"


# ------------------------------------------------------------------------ docstring


DOCUMENTED = code('''
    def f(values):
        """Add the values.

        Longer text.
        """
        return sum(values)
''')


class TestDocstring:
    def test_kept_by_default(self) -> None:
        result = changed(DOCUMENTED, "f", NEW_BODY)
        assert result.source == code('''
            def f(values):
                """Add the values.

                Longer text.
                """
                total = 0
                for value in values:
                    total += value
                return total
        ''')
        assert result.message == "replaced the body of function f (5 -> 8 lines); kept its docstring"

    def test_a_body_with_its_own_docstring_replaces_it(self) -> None:
        body = '"""Add the values, one by one."""\n' + NEW_BODY
        assert replaced(DOCUMENTED, "f", body) == code('''
            def f(values):
                """Add the values, one by one."""
                total = 0
                for value in values:
                    total += value
                return total
        ''')

    def test_keep_docstring_false_drops_it(self) -> None:
        assert replaced(DOCUMENTED, "f", "return 0", keep_docstring=False) == "def f(values):\n    return 0\n"

    def test_kept_from_a_one_line_def(self) -> None:
        before = 'def f(): "Doc."; return 1\n'
        assert replaced(before, "f", "return 2") == 'def f():\n    "Doc."\n    return 2\n'

    def test_function_without_docstring_gets_none(self) -> None:
        assert replaced("def f():\n    return 1\n", "f", "return 2") == "def f():\n    return 2\n"

    def test_already_with_the_docstring_kept(self) -> None:
        done = run(DOCUMENTED, "f", NEW_BODY).source
        unchanged(done, "already", "f", NEW_BODY)
        # keep_docstring: false wants the body without it: not in place yet.
        assert run(done, "f", NEW_BODY, keep_docstring=False).verdict == "changed"

    def test_a_docstring_alone_is_not_the_wanted_body(self) -> None:
        # The same statements after a docstring the body does not have: already (kept).
        source = 'def f():\n    """Doc."""\n    return 2\n'
        unchanged(source, "already", "f", "return 2")
        assert run(source, "f", "return 2", keep_docstring=False).source == "def f():\n    return 2\n"


# ---------------------------------------------------------------------- indentation


class TestIndentation:
    def test_tabs(self) -> None:
        before = "class C:\n\tdef f(self, xs):\n\t\treturn 1\n\n\tdef g(self):\n\t\treturn 2\n"
        # The body is written with 4 spaces; the file indents with tabs.
        after = replaced(before, "C.f", "for x in xs:\n    if x:\n        return x\nreturn None\n")
        assert after == (
            "class C:\n\tdef f(self, xs):\n"
            "\t\tfor x in xs:\n\t\t\tif x:\n\t\t\t\treturn x\n\t\treturn None\n"
            "\n\tdef g(self):\n\t\treturn 2\n"
        )

    def test_two_space_file_and_four_space_body(self) -> None:
        before = "class C:\n  def f(self, xs):\n    return 1\n"
        after = replaced(before, "C.f", "for x in xs:\n    return x\n")
        assert after == "class C:\n  def f(self, xs):\n    for x in xs:\n      return x\n"

    def test_four_space_file_and_two_space_body(self) -> None:
        before = "def outer():\n    def f(xs):\n        return 1\n    return f\n"
        after = replaced(before, "outer.f", "if xs:\n  return xs[0]\n")
        assert after == "def outer():\n    def f(xs):\n        if xs:\n            return xs[0]\n    return f\n"

    def test_an_indented_body_is_dedented_first(self) -> None:
        body = "        x = 1\n        if x:\n            return x\n"
        assert replaced("def f():\n    pass\n", "f", body) == "def f():\n    x = 1\n    if x:\n        return x\n"

    def test_multi_line_string_contents_are_kept_exactly(self) -> None:
        body = 'text = """\nline one\n  line two\n"""\nreturn text\n'
        after = replaced("class C:\n    def f(self):\n        pass\n", "C.f", body)
        assert after == 'class C:\n    def f(self):\n        text = """\nline one\n  line two\n"""\n        return text\n'

    def test_comments_and_blank_lines_of_the_body_are_indented_without_trailing_spaces(self) -> None:
        body = "# first\nx = 1\n\n# second\nif x:\n    # inside\n    return x\n# last\n"
        after = replaced("class C:\n    def f(self):\n        pass\n", "C.f", body)
        assert after == (
            "class C:\n    def f(self):\n"
            "        # first\n        x = 1\n\n        # second\n        if x:\n"
            "            # inside\n            return x\n        # last\n"
        )


# ---------------------------------------------------------------- compared by meaning


class TestAlreadyByMeaning:
    def test_other_formatting_and_comments_are_already(self) -> None:
        source = code('''
            def f(values):
                total=0   # running sum
                for value in values :
                    total += ( value )
                return total
        ''')
        unchanged(source, "already", "f", NEW_BODY)

    def test_a_different_body_is_changed(self) -> None:
        source = "def f(values):\n    return sum(values)\n"
        assert run(source, "f", NEW_BODY).verdict == "changed"

    def test_the_real_shape_already_fixed(self) -> None:
        source = "def f(values):\n    total = 0\n    for value in values:\n        total += value\n    return total\n"
        unchanged(source, "already", "f", NEW_BODY)


# ------------------------------------------------------------------------ not found


class TestNotFound:
    SOURCE = code('''
        class SpeculativeConfig:
            def _verify_args(self):
                return 1

        def _expand_kernel_impl(output):
            return None
    ''')

    def test_near_miss_by_spelling(self) -> None:
        result = unchanged(self.SOURCE, "not_found", "_expand_kernel_imp", "pass")
        assert result.message == "no function _expand_kernel_imp; did you mean _expand_kernel_impl?"

    def test_near_miss_in_another_scope(self) -> None:
        result = unchanged(self.SOURCE, "not_found", "Config._verify_args", "pass")
        assert result.message == "no function Config._verify_args; did you mean SpeculativeConfig._verify_args?"

    def test_nothing_close(self) -> None:
        result = unchanged(self.SOURCE, "not_found", "serve", "pass")
        assert result.message == "no function serve"

    def test_a_class_is_not_a_function(self) -> None:
        result = unchanged(self.SOURCE, "not_found", "SpeculativeConfig", "pass")
        assert result.message.startswith("no function SpeculativeConfig (SpeculativeConfig is a class")

    def test_two_definitions_are_refused_with_their_lines(self) -> None:
        source = code('''
            import sys
            if sys.platform == "win32":
                def f():
                    return 1
            else:
                def f():
                    return 2
        ''')
        result = unchanged(source, "not_found", "f", "return 3")
        assert result.message == (
            "function f is ambiguous: it is defined 2 times: "
            "1) line 3 in <module>: `def f(): …`; 2) line 6 in <module>: `def f(): …`; "
            "say which with `occurrence: N` (1-based, in the order listed), or `all: true` to edit every one"
        )

    def test_occurrence_picks_one_definition(self) -> None:
        source = code('''
            import sys
            if sys.platform == "win32":
                def f():
                    return 1
            else:
                def f():
                    return 2
        ''')
        result = changed(source, "f", "return 3", occurrence=2)
        assert hunks(source, result.source) == [(7, "        return 2\n", "        return 3\n")]
        assert result.message == "replaced the body of function f (1 -> 1 lines) (occurrence 2)"
        assert unchanged(source, "not_found", "f", "return 3", occurrence=3).message.startswith(
            "occurrence 3 asked, but f is defined 2 times: 1) line 3")

    def test_all_replaces_every_definition_and_says_how_many(self) -> None:
        source = code('''
            import sys
            if sys.platform == "win32":
                def f():
                    return 1
            else:
                def f():
                    return 3
        ''')
        result = changed(source, "f", "return 3", all=True)
        assert hunks(source, result.source) == [(4, "        return 1\n", "        return 3\n")]
        assert result.message == (
            "replaced the body of function f (1 -> 1 lines) (1 of 2 definitions changed (all: true), "
            "1 already in place)"
        )


# ----------------------------------------------------------------- recipe validation


class TestValidation:
    def test_body_that_does_not_parse_is_a_recipe_error(self) -> None:
        with pytest.raises(ValidationError, match=r"body of f is not valid Python: .* \(body line 2\)"):
            Edit.model_validate({"replace_function": {"function": "f", "body": "x = 1\nreturn (\n"}})

    def test_empty_body_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="body of f has no statements"):
            Edit.model_validate({"replace_function": {"function": "f", "body": "# only a comment\n"}})

    def test_function_must_be_a_qualified_name(self) -> None:
        with pytest.raises(ValidationError, match="is not a qualified name"):
            Edit.model_validate({"replace_function": {"function": "C.f()", "body": "pass"}})

    def test_unknown_parameter_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="keep_doc"):
            Edit.model_validate({"replace_function": {"function": "f", "body": "pass", "keep_doc": False}})

    def test_validation_does_not_import_libcst(self) -> None:
        import subprocess
        import sys

        code_ = (
            "import sys; from patchkit.edits import Edit; "
            "Edit.model_validate({'replace_function': {'function': 'f', 'body': 'return 1'}}); "
            "print('libcst' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code_], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "False"
