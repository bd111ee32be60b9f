"""Recipes: what to do to a host, as validated data. No I/O beyond reading the file."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from patchkit.base.built_on_use import BUILT_ON_USE, SchemaOfBuiltOnUse
from patchkit.edits import Edit, EditError
from patchkit.base.errors import UsageError
from patchkit.base.rollout import SerialField
from patchkit.recipe.redact import Redactor, find_secrets
from patchkit.recipe.variables import typed  # one type check for -e text, files, JSON and inventories
from patchkit.base.yamlsource import _TEMPLATE, Document, LoadedYaml, read_yaml, source_error

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class Strict(SchemaOfBuiltOnUse):
    """Unknown keys are errors, and types are not coerced: `max_tokens: true` is not 1.
    Built at first use: a recipe builds the models of the step kinds it has (BUILT_ON_USE)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)


def _check_specifier(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a version specifier like '>=0.10.1,<0.22'") from None
    return value


def _check_module(value: str) -> str:
    if not _MODULE.match(value):
        raise ValueError(f"{value!r} is not a dotted module name")
    return value


class PackageGate(Strict):
    """Which installed package a step is about, and which of its versions it applies to."""

    package: str | None = Field(None, description="distribution/top-level package, e.g. vllm")
    versions: str | None = Field(None, description="PEP 440 specifier; outside it the step is skipped")

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str | None) -> str | None:
        return _check_specifier(value)


class PatchStep(PackageGate):
    package: str = Field(description="top-level package to patch, found on the target without importing it")
    modules: list[str] = Field(default_factory=list, description=(
        "candidate modules; the first holding the target wins. Optional for a `diff` edit (its files "
        "name them); given, they must be the diff's"))
    edit: Edit

    @field_validator("modules")
    @classmethod
    def _modules_are_dotted(cls, value: list[str]) -> list[str]:
        for m in value:
            _check_module(m)
        return value

    @model_validator(mode="after")
    def _modules_given(self) -> "PatchStep":
        if self.edit.diff is None and not self.modules:
            raise ValueError("missing required key 'modules' (the candidate modules that may hold the target; "
                             "only a diff edit names its own)")
        if self.edit.diff is not None and self.edit.diff.text is not None:
            self.agree_with_diff()
        return self

    def agree_with_diff(self) -> None:
        """A diff names its files: `modules` are those (filled in when not given)."""
        assert self.edit.diff is not None
        named = self.edit.diff.modules
        if self.modules and sorted(set(self.modules)) != sorted(set(named)):
            raise ValueError(f"modules {', '.join(self.modules)} do not agree with the files the diff changes "
                             f"({', '.join(named)}): leave `modules` out, or list those")
        if named and named[0].split(".")[0] != self.package:
            raise ValueError(f"the diff changes {named[0]}, not a module of package {self.package} "
                             "(check `strip`)")
        self.modules = named


class Verify(Strict):
    import_: list[str] = Field(default_factory=list, alias="import",
                               description="modules imported in a fresh target interpreter after the write")
    python: str | None = Field(None, description=(
        "a program run by the target interpreter in a fresh process after the import check; the step "
        "passes only if it exits 0 (else the original is restored). The recipe's variables are a JSON "
        "object in the environment variable PATCHKIT_VARS"))
    timeout_s: float = Field(300, gt=0, description="for the import check, and again for the program")

    @field_validator("import_")
    @classmethod
    def _dotted(cls, value: list[str]) -> list[str]:
        for m in value:
            _check_module(m)
        return value


class CheckStep(PackageGate):
    python: str = Field(description=("Python source run by the target interpreter; it passes when it exits 0. "
                                      "The recipe's variables are a JSON object in the environment variable "
                                      "PATCHKIT_VARS"))
    message: str | None = Field(None, description="what a failure means, shown with the reason")
    timeout_s: float = Field(300, gt=0)


class DeployTarget(Strict):
    """The target model a drafter must fit: its config.json on the host, or values."""

    config: str | None = Field(None, description="path of the target's config.json on the host")
    hidden_size: int | None = None
    vocab_size: int | None = None
    num_hidden_layers: int | None = None


class DeployStep(Strict):
    src: str = Field(description="file or folder on the control machine (relative: to the recipe's folder)")
    dest: str = Field(description="absolute path on the host (~ allowed)")
    validate_as: str | None = Field(None, alias="validate", description="validator run on src before and dest after, e.g. eagle3-drafter")
    target: DeployTarget | None = None

    @field_validator("dest")
    @classmethod
    def _dest_is_absolute(cls, value: str) -> str:
        if not (value.startswith("/") or value.startswith("~/")):
            raise ValueError(f"dest {value!r} must be an absolute path (or start with ~/)")
        if ".." in value.split("/"):
            raise ValueError(f"dest {value!r} may not contain '..'")
        return value

    @field_validator("validate_as")
    @classmethod
    def _known_validator(cls, value: str | None) -> str | None:
        from patchkit.host.checkpoint import VALIDATORS

        if value is not None and value not in VALIDATORS:
            raise ValueError(f"unknown validator {value!r} (known: {', '.join(sorted(VALIDATORS))})")
        return value


def _words(value: Any) -> Any:
    """argv and env values are strings; a lone `{{ port }}` substitutes an int, which is fine here."""
    if isinstance(value, list):
        return [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


class Health(Strict):
    url: str = Field(description="probed from the host's side, e.g. http://127.0.0.1:8000/health")
    timeout_s: float = Field(600, gt=0, description="give up after this long")
    request_timeout_s: float = Field(5, gt=0, description="per probe: vLLM accepts connections before it is ready")
    interval_s: float = Field(1, gt=0, description="first wait between probes (backs off to 5 s)")


class Completion(Strict):
    prompt: str = "Hello"
    max_tokens: int = Field(8, ge=1)
    timeout_s: float = Field(240, gt=0, description="how long the completion may take (a first request compiles)")


class Ready(Strict):
    model: str | None = Field(None, description="/v1/models must list this id")
    completion: Completion | None = Field(None, description="a smoke completion that must succeed")


class SpecDecodeGate(Strict):
    prompts: list[str] = Field(default_factory=lambda: [f"Story {i}:" for i in range(8)], min_length=1,
                               description="sent in order, again from the first while more evidence is needed")
    prompts_file: str | None = Field(None, description=(
        "prompts from a file next to the recipe (relative to its folder): a JSON list of strings, or one "
        "prompt per non-empty line; instead of `prompts`"))
    seed: int | None = Field(None, description="sampling seed: request i gets seed + i (reproducible at temperature > 0)")
    max_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0)
    model: str | None = Field(None, description="model id for requests (default: the first /v1/models entry)")
    min_draft_tokens: int = Field(300, ge=0, description=(
        "keep sending prompts until this many drafted tokens were verified (within max_prompts and timeout_s)"))
    max_prompts: int = Field(256, ge=1, description="at most this many requests for the measurement")
    timeout_s: float = Field(900, gt=0, description="stop sending more prompts after this long")
    min_acceptance_rate: float | None = Field(None, ge=0, le=1)
    min_mean_acceptance_length: float | None = Field(None, ge=1)
    fail_when: Literal["upper", "lower"] = Field("upper", description=(
        "upper: fail only when the 95% interval's upper bound is below the bar (confidently bad); "
        "lower: fail unless its lower bound reaches it (confidently good)"))
    max_regression: float | None = Field(None, gt=0, lt=1, description=(
        "fail when acceptance (and, with `baseline`, the speedup) is more than this fraction below the last "
        "passing gate on this host with the same model, drafter and prompts"))

    @model_validator(mode="after")
    def _one_prompt_source(self) -> SpecDecodeGate:
        if self.prompts_file is not None and "prompts" in self.model_fields_set:
            raise ValueError("give `prompts` or `prompts_file`, not both")
        return self

    def bind(self, base: Path) -> None:
        """Read `prompts_file` (relative to the recipe's folder) into `prompts`."""
        if self.prompts_file is None:
            return
        path = (base / self.prompts_file).resolve()
        if not path.is_relative_to(base.resolve()):
            raise ValueError(f"{self.prompts_file!r} leaves the recipe's folder")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        if path.suffix == ".json":
            import json

            try:
                prompts = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"{path} is not JSON: {exc}") from None
            if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
                raise ValueError(f"{path} must hold a JSON list of strings")
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"{path} holds no prompt")
        self.prompts = prompts


class Baseline(Strict):
    """The same model without speculation, measured on the same prompts."""

    command: list[str] = Field(min_length=1)
    health: Health
    min_speedup: float | None = Field(None, gt=0, description="speculative tokens/s over baseline tokens/s")

    _argv = field_validator("command", mode="before")(classmethod(lambda cls, v: _words(v)))
    keep: Literal["faster", "speculative", "baseline"] = Field(
        "faster", description="which server stays up afterwards")


class LaunchStep(Strict):
    command: list[str] = Field(min_length=1, description="argv, no shell; a first word python/python3 means the target interpreter")
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    log: str | None = Field(None, description="log file on the host (default: <state_dir>/launch/<step>.log)")
    health: Health
    ready: Ready | None = None
    spec_decode: SpecDecodeGate | None = None
    baseline: Baseline | None = None
    stop_timeout_s: float = Field(30, gt=0)

    _argv = field_validator("command", "env", mode="before")(classmethod(lambda cls, v: _words(v)))

    @model_validator(mode="after")
    def _baseline_needs_gate(self) -> "LaunchStep":
        if self.baseline and not self.spec_decode:
            raise ValueError("`baseline` compares throughput on the spec_decode prompts: add `spec_decode`")
        return self


KIND_KEY = "a step kind's key"  # marks a Step field as one (run/steps/registry.py checks they are its kinds)


class Step(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str | None = None
    patch: Annotated[PatchStep | None, KIND_KEY, BUILT_ON_USE] = None
    check: Annotated[CheckStep | None, KIND_KEY, BUILT_ON_USE] = None
    deploy: Annotated[DeployStep | None, KIND_KEY, BUILT_ON_USE] = None
    launch: Annotated[LaunchStep | None, KIND_KEY, BUILT_ON_USE] = None
    verify: Verify | None = None
    upstream: str | None = Field(None, description="URL of the upstream fix or issue this step carries (shown by "
                                                   "plan, journaled; status says when the fix is upstream)")
    why: str | None = Field(None, description="why the step exists, in a sentence (shown by plan, journaled)")
    notify: list[str] = Field(default_factory=list, description=(
        "launch steps (later in the recipe) whose server restarts when this patch/deploy step changes a file; "
        "once a launch step is notified by any step, only those steps' changes in a run restart it"))

    @field_validator("upstream")
    @classmethod
    def _upstream_is_a_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+\S*$", value):
            raise ValueError(f"upstream {value!r} is not an http(s) URL of the upstream fix or issue")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> "Step":
        kinds = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a step needs exactly one of: {', '.join(STEP_KINDS)}")
        if self.verify is not None and self.patch is None:
            raise ValueError("`verify` goes with a `patch` step")
        if self.notify and self.patch is None and self.deploy is None:
            raise ValueError("`notify` goes with a `patch` or `deploy` step (it names launch steps to restart)")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if getattr(self, k) is not None)

    @property
    def checks(self) -> Verify:
        """What a patch step verifies after its write: `verify`, or the defaults (no imports)."""
        return self.verify or Verify()


STEP_KINDS = tuple(name for name, f in Step.model_fields.items() if KIND_KEY in f.metadata)


class Recipe(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str | None = None
    python: str | None = Field(None, description="target interpreter unless the inventory or -e python= says")
    vars: dict[str, Any] = Field(default_factory=dict)
    secrets: list[str] = Field(default_factory=list, description=(
        "variables whose values never appear in reports, journals or logs (shown as <secret:NAME>); "
        "names with a word ending in token, key, secret or password are secret anyway"))
    keep_runs: int = Field(20, ge=1, description="runs kept in each host's journal for this recipe")
    serial: SerialField = Field(None, description=(
        "rollout batches, e.g. [1, 10%, 100%]: a batch starts once every host of the batches before succeeded "
        "(--serial wins; then this; then the inventory's)"))
    steps: list[Step] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _unique_step_names(cls, steps: list[Step]) -> list[Step]:
        seen: set[str] = set()
        for step in steps:
            if step.name in seen:
                raise ValueError(f"two steps are named {step.name!r}")
            seen.add(step.name)
        for i, step in enumerate(steps):
            later = {s.name for s in steps[i + 1:] if s.launch is not None}
            for name in step.notify:
                if name not in later:
                    launches = [s.name for s in steps[i + 1:] if s.launch is not None]
                    raise ValueError(f"step {step.name!r} notifies {name!r}, which is not a launch step after it "
                                     f"(launch steps after it: {', '.join(launches) or 'none'})")
        return steps

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"{name!r} is not a variable name")
        return value

    def select(self, names: list[str] | None) -> list[Step]:
        if not names:
            return list(self.steps)
        known = [s.name for s in self.steps]
        unknown = [n for n in names if n not in known]
        if unknown:
            close = [c for name in unknown for c in difflib.get_close_matches(name, known, n=1)]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UsageError(f"--steps: no step named {', '.join(unknown)} in recipe {self.name} "
                             f"(steps: {', '.join(known)}){hint}")
        return [s for s in self.steps if s.name in names]


class LoadedRecipe(BaseModel):
    """A validated recipe plus where it came from (for codemod files and the journal)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    recipe: Recipe
    path: Path
    content_sha256: str  # of the file: what the journal records
    variables: dict[str, Any]
    redactor: Redactor = Field(default_factory=Redactor)
    render_sha256: str = ""  # of the file and the variables it was rendered with: what caches key on

    @property
    def render_key(self) -> str:
        return self.render_sha256 or self.content_sha256


@dataclass
class RecipeSource:
    """A recipe read once, rendered per set of variables: hosts whose variables differ get
    their own rendering (templates are substituted before validation, so a value a host's
    variable makes invalid is that host's error)."""

    path: Path
    doc: Document
    head: LoadedYaml
    declared: dict[str, Any]
    referenced: set[str]  # every name a `{{ }}` template uses
    _renders: dict[str, LoadedRecipe] = dataclass_field(default_factory=dict)

    def declared_at(self, name: str) -> str:
        """Where `vars` declares `name`, for a message about a value given for it."""
        return f"{self.head.mark_for(('vars', name))}: vars.{name}"

    @property
    def known(self) -> set[str]:
        """The variables the recipe declares or uses."""
        return set(self.declared) | self.referenced

    def render(self, variables: dict[str, Any]) -> LoadedRecipe:
        """The recipe with these variables; the same variables give the same (cached) rendering."""
        key = hashlib.sha256(json.dumps([self.doc.sha256, variables], sort_keys=True, default=repr)
                             .encode()).hexdigest()
        if key not in self._renders:
            self._renders[key] = _render(self, variables, key)
        return self._renders[key]


def read_recipe(path: str | Path) -> RecipeSource:
    """Read a recipe and its `vars` (not templated); UsageError with file:line:col."""
    path = Path(path)
    doc = read_yaml(path)
    head = doc.build({}, literal={"vars"}, only="vars")  # vars first: they are not templated
    if not isinstance(head.data, dict):
        raise source_error(head.mark_for(()), "", "a recipe is a mapping with name and steps")
    declared = head.data.get("vars") or {}
    if not isinstance(declared, dict):
        raise source_error(head.mark_for(("vars",)), "vars", "must be a mapping")
    referenced = {m.group(1) for m in _TEMPLATE.finditer(doc.text) if m.group(1)}
    return RecipeSource(path, doc, head, declared, referenced)


def load_recipe(path: str | Path, overrides: dict[str, str] | None = None) -> LoadedRecipe:
    """Read, template and validate a recipe; UsageError with file:line:col on any problem."""
    source = read_recipe(path)
    given = {name: typed(name, text, source.declared, "-e", True, source.declared_at)
             for name, text in (overrides or {}).items()}
    return source.render({**source.declared, **given})


def _render(source: RecipeSource, variables: dict[str, Any], key: str) -> LoadedRecipe:
    path, doc, declared = source.path, source.doc, source.declared
    marked: list[str] = []
    try:  # an error may quote a value ("dest '...' must be an absolute path")
        loaded = doc.build(variables, literal={"vars", "secrets"})
        listed = loaded.data.get("secrets") if isinstance(loaded.data, dict) else None
        marked = [m for m in listed if isinstance(m, str)] if isinstance(listed, list) else []
        recipe: Recipe = loaded.validate(Recipe.model_validate)
    except UsageError as exc:
        raise UsageError(Redactor(find_secrets(variables, marked)).text(str(exc))) from None
    for i, name in enumerate(recipe.secrets):
        if name not in variables:  # a typo here would leave the real variable unprotected
            raise source_error(loaded.mark_for(("secrets", i)), f"secrets[{i}]",
                               f"{name!r} is not a variable of this recipe (vars: {', '.join(declared) or 'none'}; "
                               "or give it with -e)")
    launches = [s.launch for s in recipe.steps if s.launch]
    redactor = Redactor(find_secrets(
        variables, recipe.secrets,
        commands=[c for ln in launches for c in (ln.command, ln.baseline.command if ln.baseline else [])],
        envs=[ln.env for ln in launches]))
    for i, step in enumerate(recipe.steps):
        if step.launch and step.launch.spec_decode and step.launch.spec_decode.prompts_file is not None:
            try:
                step.launch.spec_decode.bind(path.parent)
            except ValueError as exc:
                raise source_error(loaded.mark_for(("steps", i, "launch", "spec_decode", "prompts_file")),
                                   f"steps[{i}].launch.spec_decode.prompts_file", str(exc)) from None
        if step.patch and step.patch.edit.codemod:
            step.patch.edit.codemod.bind(path.parent)
        if step.patch and step.patch.edit.diff and step.patch.edit.diff.file is not None:
            where = ("steps", i, "patch", "edit", "diff", "file")
            try:
                step.patch.edit.diff.bind(path.parent)
                step.patch.agree_with_diff()
            except (EditError, ValueError) as exc:
                raise source_error(loaded.mark_for(where), f"steps[{i}].patch.edit.diff.file", str(exc)) from None
    return LoadedRecipe(recipe=recipe, path=path, content_sha256=doc.sha256, variables=variables,
                        redactor=redactor, render_sha256=key)
