"""A model field whose model is built when a value first needs it, not with the model holding it.

pydantic builds a model's validator together with the validators of every model its fields
name. A recipe step names every step kind's spec model and an edit every op's, so loading
a one-patch recipe would build the deploy, launch and check models (and every edit op's)
too: about half of the recipe models' build time, paid by every plan, status and apply.

`Annotated[Spec | None, BUILT_ON_USE]` keeps the field's type (what `model_fields`, the
loader's did-you-mean and the step-kind registry read) and validates a given value with
`Spec.model_validate`; `Spec` is declared with `defer_build=True`, so its validator is built
at its first value. Errors are `Spec`'s own, placed under the field (pydantic-core prefixes
the location of a ValidationError raised inside a validator), so messages stay as they
were. The JSON Schema is `Spec`'s, as if the field were a plain `Spec | None` (models with
such fields take `SchemaOfBuiltOnUse` as a base: pydantic gives a field a title unless its
schema is a model's, and these fields' schemas are not a model's until it is built).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


def _the_model(source: Any) -> type[BaseModel]:
    members = typing.get_args(source) if typing.get_origin(source) in (typing.Union, types.UnionType) else (source,)
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    others = [m for m in members if m not in models and m is not type(None)]
    if len(models) != 1 or others:
        raise TypeError(f"BUILT_ON_USE goes on `Model` or `Model | None`, not {source!r}")
    return models[0]


class BuiltOnUse:
    """The marker (use the one instance, BUILT_ON_USE)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        model = _the_model(source)

        def validate(value: Any) -> BaseModel:
            return model.model_validate(value)

        # Serialized by inference: a value is always an instance of `model`, dumped by its own serializer.
        schema = core_schema.no_info_plain_validator_function(validate, metadata={_MODEL: model})
        return core_schema.nullable_schema(schema) if model is not source else schema

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        inner = schema["schema"] if schema["type"] == "nullable" else schema
        real = inner["metadata"][_MODEL].__pydantic_core_schema__  # builds the model: only `patchkit schema` asks
        return handler(core_schema.nullable_schema(real) if inner is not schema else real)


_MODEL = "patchkit.base.built_on_use.model"
BUILT_ON_USE = BuiltOnUse()


def _is_built_on_use(schema: Any) -> bool:
    while schema.get("type") in ("model-field", "dataclass-field", "typed-dict-field", "default", "nullable"):
        schema = schema["schema"]
    return schema.get("type") == "function-plain" and _MODEL in (schema.get("metadata") or {})


class JsonSchema(GenerateJsonSchema):
    """The JSON Schema a BUILT_ON_USE field would have as a plain model field: no title of its own."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return not _is_built_on_use(schema) and super().field_title_should_be_set(schema)


class SchemaOfBuiltOnUse(BaseModel):
    """A base for models with BUILT_ON_USE fields: their JSON Schema as if the fields were plain."""

    model_config = ConfigDict(defer_build=True)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("schema_generator", JsonSchema)
        return super().model_json_schema(*args, **kwargs)
