"""The edit contract without libcst: parameters (pydantic), verdicts, results.

Kept free of libcst so that loading and validating a recipe stays fast; the
libcst engines are imported only when an edit is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

Verdict = Literal["changed", "already", "not_found"]
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class EditResult:
    verdict: Verdict
    source: str
    message: str


class EditError(Exception):
    """The source cannot be edited as asked (not a parse error of ours: theirs)."""


class EditSpec(BaseModel):
    """Base of every edit's parameters; subclasses implement `apply`."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a recipe's `names: [1]` is not ["1"]

    def apply(self, source: str) -> EditResult:  # pragma: no cover - abstract
        raise NotImplementedError
