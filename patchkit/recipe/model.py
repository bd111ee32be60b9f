"""Recipes: what to do to a host, as validated data. No I/O beyond reading the file."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Optional, TypeVar, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from patchkit.base.built_on_use import BUILT_ON_USE, SchemaOfBuiltOnUse
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


def check_module(value: str) -> str:
    if not _MODULE.match(value):
        raise ValueError(f"{value!r} is not a dotted module name")
    return value


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
            check_module(m)
        return value


class BindError(Exception):
    """A spec's problem with a file it names beside the recipe, placed at `where` (keys below
    the kind's own key, e.g. ("edit", "diff", "file"))."""

    def __init__(self, where: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


class KindSpec(Strict):
    """What a recipe holds under a step kind's key. Each kind's spec model (in the kind's own
    module under run/steps/) is one, registered with `register_kind`; what it says here is how
    the kind fits into a recipe, so this layer never names a kind."""

    takes_verify: ClassVar[bool] = False  # a `verify:` beside it checks what the step wrote
    may_notify: ClassVar[bool] = False  # a `notify:` beside it names servers its changes restart
    restarts: ClassVar[bool] = False  # its steps are what a `notify:` names (it starts a server)

    @classmethod
    def of(cls: type[K], step: Step) -> K | None:
        """The step's spec if the step is of this kind."""
        spec = step.spec
        return spec if isinstance(spec, cls) else None

    def bind(self, folder: Path) -> None:
        """Read what the spec names beside the recipe (relative to `folder`, the recipe's);
        a problem is a BindError. Nothing by default."""

    def secret_words(self) -> tuple[list[list[str]], list[dict[str, str]]]:
        """The argv lists and environments the step hands the host: a secret variable's value
        found in them is redacted wherever it shows. None by default."""
        return [], []


class PackageGate(KindSpec):
    """Which installed package a step is about, and which of its versions it applies to."""

    package: str | None = Field(None, description="distribution/top-level package, e.g. vllm")
    versions: str | None = Field(None, description="PEP 440 specifier; outside it the step is skipped")

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str | None) -> str | None:
        return _check_specifier(value)


K = TypeVar("K", bound=KindSpec)

# kind key -> its spec model, in registration order (patchkit.run.steps.registry fills it).
# The recipe models below are built from it at first use (step_model, recipe_model).
SPECS: dict[str, type[KindSpec]] = {}


def register_kind(name: str, spec: type[KindSpec]) -> None:
    if _built.cache_info().currsize:
        raise RuntimeError(f"step kind {name!r} registered after the recipe models were built")
    if name in SPECS:
        raise RuntimeError(f"step kind {name!r} registered twice")
    SPECS[name] = spec


def _kinds_where(flag: str) -> list[str]:
    return [name for name, spec in SPECS.items() if getattr(spec, flag)]


def _either(names: list[str]) -> str:
    return " or ".join(f"`{name}`" for name in names)


class StepHead(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str | None = None


class Step(StepHead):
    """A recipe's step. The model a recipe validates with is built from this and the
    registered kinds (step_model): one optional field per kind key, after `description`."""

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
        kinds = [k for k in SPECS if getattr(self, k, None) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a step needs exactly one of: {', '.join(SPECS)}")
        if self.verify is not None and not self.spec.takes_verify:
            raise ValueError(f"`verify` goes with a {_either(_kinds_where('takes_verify'))} step")
        if self.notify and not self.spec.may_notify:
            raise ValueError(f"`notify` goes with a {_either(_kinds_where('may_notify'))} step (it names "
                             f"{' or '.join(_kinds_where('restarts'))} steps to restart)")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in SPECS if getattr(self, k, None) is not None)

    @property
    def spec(self) -> KindSpec:
        """What the recipe holds under the step's kind key."""
        spec: KindSpec = getattr(self, self.kind)
        return spec

    @property
    def checks(self) -> Verify:
        """What a patch step verifies after its write: `verify`, or the defaults (no imports)."""
        return self.verify or Verify()


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
    steps: list[Step] = Field(min_length=1)  # of step_model() in the model a recipe validates with

    @field_validator("steps")
    @classmethod
    def _unique_step_names(cls, steps: list[Step]) -> list[Step]:
        seen: set[str] = set()
        for step in steps:
            if step.name in seen:
                raise ValueError(f"two steps are named {step.name!r}")
            seen.add(step.name)
        restarting = " or ".join(_kinds_where("restarts"))
        for i, step in enumerate(steps):
            later = [s.name for s in steps[i + 1:] if s.spec.restarts]
            for name in step.notify:
                if name not in later:
                    raise ValueError(f"step {step.name!r} notifies {name!r}, which is not a {restarting} step after "
                                     f"it ({restarting} steps after it: {', '.join(later) or 'none'})")
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


@functools.cache
def _built() -> tuple[type[Step], type[Recipe]]:
    if not SPECS:
        raise RuntimeError("no step kinds registered: import patchkit.run.steps.registry before loading a recipe")
    kinds: dict[str, Any] = {name: (Annotated[Optional[spec], BUILT_ON_USE], None) for name, spec in SPECS.items()}
    # Fields in the order of the bases, reversed: StepHead's, the kinds', then Step's own.
    with_kinds: Any = create_model("StepKinds", __base__=StepHead, __module__=__name__, **kinds)
    step: Any = create_model("Step", __base__=(Step, with_kinds), __module__=__name__)
    recipe: Any = create_model("Recipe", __base__=Recipe, __module__=__name__, steps=(list[step], Field(min_length=1)))
    return cast("type[Step]", step), cast("type[Recipe]", recipe)


def step_model() -> type[Step]:
    """The model of a recipe's step: Step with one optional field per registered kind."""
    return _built()[0]


def recipe_model() -> type[Recipe]:
    """The model a recipe validates with (`patchkit schema` is its JSON Schema)."""
    return _built()[1]


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
        recipe: Recipe = loaded.validate(recipe_model().model_validate)
    except UsageError as exc:
        raise UsageError(Redactor(find_secrets(variables, marked)).text(str(exc))) from None
    for i, name in enumerate(recipe.secrets):
        if name not in variables:  # a typo here would leave the real variable unprotected
            raise source_error(loaded.mark_for(("secrets", i)), f"secrets[{i}]",
                               f"{name!r} is not a variable of this recipe (vars: {', '.join(declared) or 'none'}; "
                               "or give it with -e)")
    handed = [step.spec.secret_words() for step in recipe.steps]
    redactor = Redactor(find_secrets(variables, recipe.secrets, commands=[c for cs, _ in handed for c in cs],
                                     envs=[e for _, es in handed for e in es]))
    for i, step in enumerate(recipe.steps):
        try:
            step.spec.bind(path.parent)
        except BindError as exc:
            where = (step.kind, *exc.where)
            raise source_error(loaded.mark_for(("steps", i, *where)), f"steps[{i}].{'.'.join(where)}",
                               exc.message) from None
    return LoadedRecipe(recipe=recipe, path=path, content_sha256=doc.sha256, variables=variables,
                        redactor=redactor, render_sha256=key)
