"""A recipe builds the models of the step kinds and edit ops it uses, and no others.

Counted in a fresh interpreter (a model, once built, stays built): which patchkit models
pydantic generated a schema for while importing patchkit and loading the recipe, its own or
inline in another's (pydantic's schema generator is wrapped to record them). No timing."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

PROBE = r"""
import json, sys
from pydantic._internal._generate_schema import GenerateSchema

generated = set()
real = GenerateSchema._model_schema

def recording(self, cls):
    generated.add(f"{cls.__module__}.{cls.__qualname__}")
    return real(self, cls)

GenerateSchema._model_schema = recording
from patchkit.recipe.model import load_recipe

recipe = load_recipe(sys.argv[1]).recipe
built = sorted(m for m in generated if m.startswith("patchkit"))
print(json.dumps({"built": built, "kinds": [s.kind for s in recipe.steps]}))
"""


def _built_after_loading(recipe: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-P", "-c", PROBE, recipe], cwd=REPO, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


def test_a_one_patch_recipe_builds_only_the_patch_models_and_its_edit_op() -> None:
    result = _built_after_loading(str(REPO / "bench" / "bench_eagle3.yaml"))
    assert result["kinds"] == ["patch"]
    built = set(result["built"])
    assert {"patchkit.recipe.model.Recipe", "patchkit.recipe.model.PatchStep", "patchkit.edits.Edit",
            "patchkit.edits.ops.list_insert.spec.ListInsert"} <= built
    not_used = {"patchkit.recipe.model.CheckStep", "patchkit.recipe.model.DeployStep", "patchkit.recipe.model.LaunchStep",
                "patchkit.recipe.model.Health", "patchkit.recipe.model.SpecDecodeGate", "patchkit.recipe.model.Baseline",
                "patchkit.edits.ops.list_remove.spec.ListRemove", "patchkit.edits.ops.set_value.spec.SetValue", "patchkit.edits.ops.dict_set.spec.DictSet",
                "patchkit.edits.ops.call_kwarg.spec.CallKwarg", "patchkit.edits.ops.codemod.spec.CodemodEdit",
                "patchkit.edits.ops.replace_function.spec.ReplaceFunction", "patchkit.edits.ops.diff.spec.DiffEdit",
                "patchkit.run.results.DeployedFile", "patchkit.run.results.LaunchServer", "patchkit.run.results.LaunchDetails"}
    assert built & not_used == set()


def test_the_models_of_the_kinds_a_recipe_has_are_built_when_it_loads(tmp_path: object) -> None:
    from pathlib import Path

    recipe = Path(str(tmp_path)) / "r.yaml"
    recipe.write_text("name: r\nsteps:\n  - name: c\n    check: {python: 'print(1)'}\n"
                      "  - name: d\n    deploy: {src: x, dest: /tmp/x}\n")
    built = set(_built_after_loading(str(recipe))["built"])
    assert {"patchkit.recipe.model.CheckStep", "patchkit.recipe.model.DeployStep"} <= built
    assert {"patchkit.recipe.model.PatchStep", "patchkit.recipe.model.LaunchStep", "patchkit.edits.Edit"} & built == set()
