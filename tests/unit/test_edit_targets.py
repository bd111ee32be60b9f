"""Which places an edit targets and the shapes it can reach.

The ambiguity rule: a target must match exactly one place. Several matches change
nothing and fail, naming every place (line, scope, code) and how to choose: `within`
(an exact scope; nested scopes only with `nested: true`), a target written as it is
assigned (`self.x` is not `x`), `occurrence: N` or `all: true`.

The vocabulary: `target: assignment | call_arg | return | default` says what holds the
value, `path` steps into it, `callee` is matched by meaning. Golden tests: exact source
in, exact source out, and a second apply that finds it in place.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from pydantic import ValidationError

from patchkit.edits import Edit, EditResult
from patchkit.edits.testing import assert_idempotent, assert_refused
from patchkit.recipe.model import load_recipe

REPO = Path(__file__).resolve().parents[2]


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def run(kind: str, source: str, **params: Any) -> EditResult:
    return Edit.model_validate({kind: params}).apply(source)


changed = assert_idempotent  # changes, compiles, and a second apply is `already` (patchkit.edits.testing)
refused = assert_refused  # changes nothing and fails: its message


HOW = "say which with `occurrence: N` (1-based, in the order listed), or `all: true` to edit every one"

# ------------------------------------------------------------------ the ambiguity rule

IF_ELSE = code('''
    if fast:
        limit = 8
    else:
        limit = 2
''')

# Shaped like ansible's _errors.py, where set_value on `message` rewrote 11 assignments.
REASSIGNED = code('''
    def explain(exc):
        message = str(exc)
        if not message:
            message = "unknown error"
        message = message.strip()
        return message
''')


class TestOnePlaceOrAnError:
    def test_if_else_assignments_are_ambiguous_and_every_place_is_named(self) -> None:
        message = refused("set_value", IF_ELSE, names=["limit"], value=4)
        assert message == (
            "assignment to limit is ambiguous: it matches 2 places: "
            "1) line 2 in <module>: `limit = 8`; 2) line 4 in <module>: `limit = 2`; " + HOW
        )

    def test_reassignments_are_ambiguous_even_when_one_uses_the_old_value(self) -> None:
        message = refused("set_value", REASSIGNED, names=["message"], value="x")
        assert message.startswith("assignment to message is ambiguous: it matches 3 places: "
                                  "1) line 2 in explain: `message = str(exc)`; "
                                  "2) line 4 in explain: `message = \"unknown error\"`; "
                                  "3) line 5 in explain: `message = message.strip()`; ")

    def test_occurrence_edits_that_place_only(self) -> None:
        result = changed("set_value", REASSIGNED, names=["message"], expr="repr(exc)", occurrence=1)
        assert result.source == REASSIGNED.replace("message = str(exc)", "message = repr(exc)")
        assert result.message == "set message = repr(exc) (was str(exc)) in explain (occurrence 1 of 3)"

    def test_occurrence_past_the_last_place_names_them(self) -> None:
        message = refused("set_value", IF_ELSE, names=["limit"], value=4, occurrence=3)
        assert message == ("occurrence 3 asked, but the assignment to limit matches 2 places: "
                           "1) line 2 in <module>: `limit = 8`; 2) line 4 in <module>: `limit = 2`")

    def test_all_edits_every_place_and_says_how_many(self) -> None:
        result = changed("set_value", IF_ELSE.replace("limit = 2", "limit = 4"), names=["limit"], value=4, all=True)
        assert result.source == IF_ELSE.replace("8", "4").replace("2", "4")
        assert result.message == "set limit = 4 (was 8) (1 of 2 places changed (all: true), 1 already in place)"

    def test_a_place_that_cannot_be_edited_fails_all(self) -> None:
        source = "x = [1]\nx = None\n"
        message = refused("list_insert", source, names=["x"], values=[2], all=True)
        assert message == ("cannot edit the assignment to x: line 2 in <module>: "
                           "the value is not a list, tuple or set literal (libcst node: Name)")

    def test_every_op_applies_the_rule(self) -> None:
        two_lists = "x = [1]\nx = [2]\n"
        assert "is ambiguous: it matches 2 places" in refused("list_insert", two_lists, names=["x"], values=[3])
        assert "is ambiguous: it matches 2 places" in refused("list_remove", two_lists, names=["x"], values=[1])
        assert "is ambiguous: it matches 2 places" in refused("dict_set", "d = {}\nd = {}\n", names=["d"], key="k",
                                                              value=1)
        assert "call to f is ambiguous: it matches 2 places" in refused("call_kwarg", "f(1)\nf(2)\n", callee="f",
                                                                       keyword="k", value=1)
        two_returns = "def f(a):\n    if a:\n        return [1]\n    return [2]\n"
        assert "return statement with a value within f is ambiguous" in refused(
            "list_insert", two_returns, target="return", within="f", values=[3])
        two_defs = "def f(k=1): pass\ndef g(k=1): pass\n"
        assert ("parameter k with a default is ambiguous: it matches 2 places: 1) line 1 in f: `k=1`; "
                "2) line 2 in g: `k=1`; " + HOW + ", or name one scope with `within:` (f, g)"
                ) == refused("set_value", two_defs, target="default", arg="k", value=2)


SCOPED = code('''
    supported = ["llama"]


    class Config:
        supported = ["llama"]

        def check(self):
            supported = ["llama"]

            def inner():
                supported = ["llama"]
                return supported
            return inner
''')


class TestScopes:
    def test_without_within_the_whole_file_is_searched_and_the_scopes_are_offered(self) -> None:
        message = refused("list_insert", SCOPED, names=["supported"], values=["qwen"])
        assert message.endswith(HOW + ", or name one scope with `within:` "
                                      "(<module>, Config, Config.check, Config.check.inner)")

    def test_within_is_that_scope_exactly(self) -> None:
        result = changed("list_insert", SCOPED, names=["supported"], values=["qwen"], within="Config.check")
        lines = result.source.splitlines()
        assert lines[7] == '        supported = ["llama", "qwen"]'
        assert [i for i, (a, b) in enumerate(zip(SCOPED.splitlines(), lines)) if a != b] == [7]
        assert result.message == "added 'qwen' at the end in Config.check"

    def test_a_nested_scope_counts_only_with_nested(self) -> None:
        message = refused("list_insert", SCOPED, names=["supported"], values=["qwen"], within="Config.check",
                          nested=True)
        assert "it matches 2 places: 1) line 8 in Config.check" in message
        assert "2) line 11 in Config.check.inner" in message
        result = changed("list_insert", SCOPED, names=["supported"], values=["qwen"], within="Config.check",
                         nested=True, all=True)
        assert result.source.count('"qwen"') == 2

    def test_a_target_only_in_a_nested_scope_says_to_add_nested(self) -> None:
        source = "def outer():\n    def inner():\n        x = [1]\n"
        message = refused("list_insert", source, names=["x"], values=[2], within="outer")
        assert message == ("no assignment to x within outer; "
                           "found x in outer.inner (a scope nested in outer: add `nested: true`)")

    def test_module_scope(self) -> None:
        result = changed("list_insert", SCOPED, names=["supported"], values=["qwen"], within="<module>")
        assert result.source.splitlines()[0] == 'supported = ["llama", "qwen"]'
        assert result.source.count('"qwen"') == 1

    def test_a_decorator_call_belongs_to_the_enclosing_scope(self) -> None:
        source = code('''
            class C:
                @validator(mode="after")
                def check(self):
                    validator(mode="after")
        ''')
        result = changed("call_kwarg", source, callee="validator", keyword="mode", value="before", within="C")
        assert result.source.splitlines()[1] == '    @validator(mode="before")'
        assert result.source.splitlines()[3] == '        validator(mode="after")'

    def test_the_eagle3_list_is_one_place_though_its_name_occurs_three_times(self) -> None:
        # vLLM's _verify_args: assignment, any(...) and an f-string; only the assignment is a target.
        source = code('''
            class SpeculativeConfig:
                def _verify_args(self):
                    eagle3_target_supported = ["llama", "qwen"]
                    if not any(
                        supported in self.model_type
                        for supported in eagle3_target_supported
                    ):
                        raise ValueError(f"only {eagle3_target_supported} models")
        ''')
        result = changed("list_insert", source, names=["eagle3_target_supported", "aux_hidden_states_supported"],
                         within="SpeculativeConfig._verify_args", values=["kimi_k2"])
        assert result.source == source.replace('"qwen"]', '"qwen", "kimi_k2"]')


ATTRIBUTES = code('''
    x = [1]


    class Config:
        x = [1]

        def __init__(self, other):
            self.x = [1]
            other.x = [1]
    Config.x = [1]
''')


class TestTargetsAsWritten:
    @pytest.mark.parametrize("name, line", [("x", 0), ("self.x", 7), ("other.x", 8), ("Config.x", 9)])
    def test_each_spelling_is_its_own_target(self, name: str, line: int) -> None:
        within = {"x": "<module>"}.get(name)
        params: dict[str, Any] = {"within": within} if within else {}
        result = changed("list_insert", ATTRIBUTES, names=[name], values=[2], **params)
        old, new = ATTRIBUTES.splitlines(), result.source.splitlines()
        assert [i for i, (a, b) in enumerate(zip(old, new)) if a != b] == [line]

    def test_a_bare_name_does_not_match_an_attribute_and_says_what_would(self) -> None:
        message = refused("set_value", "class C:\n    def f(self):\n        self.limit = 1\n", names=["limit"], value=2)
        assert message == "no assignment to limit; found self.limit; a target matches only as written: names: [self.limit]"

    def test_a_class_attribute_is_a_bare_name_within_the_class(self) -> None:
        result = changed("list_insert", ATTRIBUTES, names=["x"], within="Config", values=[2])
        assert result.source.splitlines()[4] == "    x = [1, 2]"


# ------------------------------------------------------------------ the vocabulary


class TestCallArguments:
    def test_a_keyword_argument_display(self) -> None:
        source = code('''
            setup(
                name="pkg",
                packages=[
                    "pkg",
                ],
            )
        ''')
        result = changed("list_insert", source, target="call_arg", callee="setup", arg="packages", values=["pkg.ext"])
        assert result.source == source.replace('        "pkg",\n', '        "pkg",\n        "pkg.ext",\n')

    def test_a_positional_argument(self) -> None:
        result = changed("list_insert", "register('llama', ['a'])\n", target="call_arg", callee="register", arg=1,
                         values=["b"])
        assert result.source == "register('llama', ['a', 'b'])\n"

    def test_set_value_on_an_argument(self) -> None:
        result = changed("set_value", "setup(version='1.0')\n", target="call_arg", callee="setup", arg="version",
                         value="1.1")
        assert result.source == "setup(version='1.1')\n"
        assert result.message == "set setup(version=) = '1.1' (was '1.0')"

    def test_a_missing_argument_is_named(self) -> None:
        message = refused("list_insert", "setup(name='x')\n", target="call_arg", callee="setup", arg="packages",
                          values=["a"])
        assert message == "cannot edit the keyword packages of a call to setup: line 1 in <module>: the call passes no keyword packages"

    def test_a_position_after_star_args_is_unknown(self) -> None:
        message = refused("list_insert", "f(*a, [1])\n", target="call_arg", callee="f", arg=1, values=[2])
        assert "a *a argument comes before position 1: its position is unknown" in message


class TestReturnsAndDefaults:
    def test_a_returned_display(self) -> None:
        source = code('''
            def supported_models():
                return [
                    "llama",
                ]
        ''')
        result = changed("list_insert", source, target="return", within="supported_models", values=["kimi_k2"])
        assert result.source == source.replace('"llama",\n', '"llama",\n        "kimi_k2",\n')

    def test_a_returned_sum(self) -> None:
        source = "def f():\n    return BASE + ['a']\n"
        assert changed("list_insert", source, target="return", within="f", values=["b"]).source == \
            "def f():\n    return BASE + ['a', 'b']\n"

    def test_a_return_in_a_nested_function_is_not_its_outer_functions(self) -> None:
        source = "def f():\n    def g():\n        return [1]\n    return g\n"
        assert changed("list_insert", source, target="return", within="f.g", values=[2]).source == \
            "def f():\n    def g():\n        return [1, 2]\n    return g\n"
        assert "the value is not a list" in refused("list_insert", source, target="return", within="f", values=[2])

    def test_a_default_argument(self) -> None:
        source = "class E:\n    def __init__(self, timeout=10, *, retries: int = 3):\n        pass\n"
        result = changed("set_value", source, target="default", within="E.__init__", arg="retries", value=5)
        assert result.source == source.replace("= 3", "= 5")
        assert result.message == "set the default of retries = 5 (was 3) in E.__init__"

    def test_a_default_tuple(self) -> None:
        assert changed("list_insert", "def f(kinds=('a',)): pass\n", target="default", arg="kinds",
                       values=["b"]).source == "def f(kinds=('a', 'b')): pass\n"

    def test_a_lambda_default_is_not_a_def_parameter(self) -> None:
        message = refused("set_value", "h = lambda k=1: k\n", target="default", arg="k", value=2)
        assert message == "no parameter k with a default"


class TestOperandsAndSubscripts:
    def test_the_display_of_a_sum(self) -> None:
        assert changed("list_insert", "x = BASE + ['a']\n", names=["x"], values=["b"]).source == "x = BASE + ['a', 'b']\n"

    def test_presence_counts_in_every_display_and_removal_reaches_each(self) -> None:
        source = "x = ['a'] + BASE + ['b', 'a']\n"
        assert run("list_insert", source, names=["x"], values=["b"]).verdict == "already"
        assert changed("list_remove", source, names=["x"], values=["a"]).source == "x = [] + BASE + ['b']\n"

    def test_augmented_assignment(self) -> None:
        source = "x = ['a']\nif extra:\n    x += ['b']\n"
        assert "is ambiguous: it matches 2 places" in refused("list_insert", source, names=["x"], values=["c"])
        assert changed("list_insert", source, names=["x"], values=["c"], occurrence=2).source == \
            "x = ['a']\nif extra:\n    x += ['b', 'c']\n"

    def test_a_set_union(self) -> None:
        assert changed("list_insert", "s = BASE | {'a'}\n", names=["s"], values=["b"]).source == "s = BASE | {'a', 'b'}\n"

    def test_a_subscript_assignment_matched_by_meaning(self) -> None:
        source = "REGISTRY = {}\nREGISTRY[\"llama\"] = ['a']\n"
        result = changed("list_insert", source, names=["REGISTRY['llama']"], values=["b"])
        assert result.source == "REGISTRY = {}\nREGISTRY[\"llama\"] = ['a', 'b']\n"

    def test_dict_set_on_a_subscript_assignment(self) -> None:
        source = "CFG['limits'] = {'a': 1}\n"
        assert changed("dict_set", source, names=["CFG['limits']"], key="b", value=2).source == \
            "CFG['limits'] = {'a': 1, 'b': 2}\n"


class TestPaths:
    def test_a_list_inside_a_dict_value(self) -> None:
        source = code('''
            MODELS = {
                "llama": ["a"],
                "qwen": ["b"],
            }
        ''')
        assert changed("list_insert", source, names=["MODELS"], path=["qwen"], values=["c"]).source == \
            source.replace('["b"]', '["b", "c"]')

    def test_keys_and_indexes(self) -> None:
        source = "M = {'k': [['a'], ['b']], 1: {'x': 0}}\n"
        assert changed("list_insert", source, names=["M"], path=["k", -1], values=["c"]).source == \
            "M = {'k': [['a'], ['b', 'c']], 1: {'x': 0}}\n"
        assert changed("set_value", source, names=["M"], path=[1, "x"], value=5).source == \
            "M = {'k': [['a'], ['b']], 1: {'x': 5}}\n"

    def test_field_default_factory(self) -> None:
        source = code('''
            @dataclass
            class Config:
                targets: list[str] = field(default_factory=lambda: ["llama"])
                other: list[str] = field(default_factory=list)
        ''')
        result = changed("list_insert", source, names=["targets"], within="Config", path=["default_factory"],
                         values=["kimi_k2"])
        assert result.source == source.replace('["llama"]', '["llama", "kimi_k2"]')
        message = refused("list_insert", source, names=["other"], within="Config", path=["default_factory"],
                          values=["kimi_k2"])
        assert message.endswith("the value is not a list, tuple or set literal (libcst node: Name)")

    def test_a_missing_key_or_index_says_what_is_there(self) -> None:
        message = refused("set_value", "x = {'a': {'b': 1}}\n", names=["x"], path=["a", "c"], value=2)
        assert message.endswith("at 'a': the dict has no key 'c' (keys: 'b')")
        message = refused("set_value", "x = [1, 2]\n", names=["x"], path=[5], value=2)
        assert message.endswith("a list has 2 elements, no index 5")

    def test_a_dict_key_path_with_a_colliding_key_is_refused(self) -> None:
        message = refused("set_value", "x = {1: 'a'}\n", names=["x"], path=[True], value="b")
        assert "key True and the dict's key 1 are one key in Python" in message


class TestCallees:
    def test_super_init(self) -> None:
        source = "class C(B):\n    def __init__(self):\n        super().__init__(a=1)\n"
        assert changed("call_kwarg", source, callee="super().__init__", keyword="b", value=2).source == \
            "class C(B):\n    def __init__(self):\n        super().__init__(a=1, b=2)\n"

    def test_a_method_of_a_string_whatever_its_quotes(self) -> None:
        assert changed("call_kwarg", "s = ', '.join(xs)\n", callee='", ".join', keyword="k", value=1).source == \
            "s = ', '.join(xs, k=1)\n"
        assert changed("list_insert", "s = ', '.join(['a'])\n", target="call_arg", callee="', '.join", arg=0,
                       values=["b"]).source == "s = ', '.join(['a', 'b'])\n"

    def test_alternatives(self) -> None:
        source = "m = torch.compile(model)\n"
        assert changed("call_kwarg", source, callee=["compile", "torch.compile"], keyword="dynamic",
                       value=False).source == "m = torch.compile(model, dynamic=False)\n"


# -------------------------------------------------------------------- validation


class TestValidation:
    @pytest.mark.parametrize("kind, params, error", [
        ("list_insert", {"target": "call_arg", "callee": "f", "values": [1]}, "target: call_arg needs `arg`"),
        ("list_insert", {"target": "call_arg", "arg": "k", "values": [1]}, "target: call_arg needs `callee`"),
        ("list_insert", {"values": [1]}, "target: assignment needs `names`"),
        ("list_insert", {"target": "return", "names": ["x"], "values": [1]}, "`names` does not apply to target: return"),
        ("set_value", {"names": ["x"], "arg": "k", "value": 1}, "`arg` does not apply to target: assignment"),
        ("set_value", {"target": "default", "arg": 0, "value": 1}, "target: default names the parameter"),
        ("set_value", {"target": "call_arg", "callee": "f", "arg": "not a name", "value": 1}, "is not a keyword name"),
        ("set_value", {"names": ["x + 1"], "value": 1}, "'x \\+ 1' is not an assignment target"),
        ("set_value", {"names": ["x"], "value": 1, "occurrence": 0}, "greater than or equal to 1"),
        ("set_value", {"names": ["x"], "value": 1, "occurrence": 1, "all": True}, "give `occurrence` or `all`, not both"),
        ("set_value", {"names": ["x"], "value": 1, "nested": True}, "`nested` applies to a `within` scope"),
        ("set_value", {"names": ["x"], "value": 1, "within": "C.f()"}, "is not a scope like Class.method"),
        ("call_kwarg", {"callee": "f(", "keyword": "k", "value": 1}, "callee 'f\\(' is not a Python expression"),
        ("set_value", {"names": ["x"], "paths": [1], "value": 1}, "paths"),
        ("replace_function", {"function": "f", "body": "pass", "within": "C"}, "within"),
    ])
    def test_recipe_errors(self, kind: str, params: dict[str, Any], error: str) -> None:
        with pytest.raises(ValidationError, match=error):
            Edit.model_validate({kind: params})

    def test_a_yaml_date_is_not_taken_for_a_value(self) -> None:
        import datetime

        with pytest.raises(ValidationError, match="is a date"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": datetime.date(2020, 1, 1)}})

    def test_the_schema_shows_the_vocabulary(self) -> None:
        schema = Edit.model_json_schema()
        fields = schema["$defs"]["ListInsert"]["properties"]
        assert fields["target"]["enum"] == ["assignment", "call_arg", "return", "default"]
        assert {"names", "callee", "arg", "path", "within", "nested", "occurrence", "all"} <= set(fields)
        assert schema["$defs"]["ListInsert"]["additionalProperties"] is False


# ------------------------------------------------- shipped recipes on real releases

RELEASES = ["0.10.2", "0.11.0", "0.13.0", "0.15.1", "0.16.0", "0.17.1", "0.18.0", "0.21.0", "0.22.0", "0.32.0"]


def shipped_patch_steps() -> list[tuple[str, Any]]:
    steps = []
    for path in sorted((REPO / "recipes").glob("*.yaml")) + sorted((REPO / "fixtures" / "recipes").glob("*.yaml")):
        if path.name.startswith("bad_"):
            continue
        for step in load_recipe(path).recipe.steps:
            if step.patch:
                steps.append((f"{path.name}:{step.name}", step))
    return steps


def module_file(package: str, module: str, version: str | None) -> Path | None:
    from fixtures.vllm_envs import release_file

    rel = module.replace(".", "/")
    if version is None:
        base = REPO / "fixtures" / "pkgs" / package
        return next((p for p in (base / f"{rel}.py", base / rel / "__init__.py") if p.is_file()), None)
    return release_file(version, f"{rel}.py") or release_file(version, f"{rel}/__init__.py")


@pytest.mark.wheels
@pytest.mark.parametrize("name, step", shipped_patch_steps(), ids=[n for n, _ in shipped_patch_steps()])
def test_shipped_recipes_match_one_place_on_every_release_they_apply_to(name: str, step: Any) -> None:
    spec = step.patch
    versions = [v for v in RELEASES if v in SpecifierSet(spec.versions or "")] if spec.package == "vllm" else [None]
    outcomes = []
    for version in versions:
        for module in spec.modules:  # the first module holding the target wins
            path = module_file(spec.package, module, version)
            if path is None:
                continue
            result = spec.edit.apply(path.read_text())
            if result.verdict != "not_found":
                break
        assert result.verdict in ("changed", "already"), f"{name} on {version}: {result.message}"
        if result.verdict == "changed":
            assert "occurrence" not in result.message and "all: true" not in result.message
        outcomes.append(result.verdict)
    assert outcomes
