"""Secret values: which they are, and keeping them out of everything patchkit writes or shows.

A value is secret when the recipe lists its variable under `secrets:` (whatever gives it its
value: `vars` or `-e`), when the variable's name says so, or when it is a launch `env` value
under such a name (HF_TOKEN) or the argument of such a flag (`--api-key VALUE`,
`--api-key=VALUE`). Reports, journal records, logs and launch logs show `<secret:NAME>`
instead; the host still gets the real value.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# A word of the name ends in one of these: hf_token, HF_TOKEN, apikey, --api-key, db_password.
# Not plurals or longer words: max_tokens and tokenizer are settings, and redacting a "128"
# would garble every message that has the number in it.
_SECRET_WORD = re.compile(r"(token|key|secret|password|passwd)$", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<secret:([^<>\s]+)>")


def is_secret_name(name: str) -> bool:
    return any(_SECRET_WORD.search(word) for word in re.split(r"[^A-Za-z0-9]+", name) if word)


def placeholder(name: str) -> str:
    return f"<secret:{name}>"


class Redactor:
    """Replaces every secret value by its placeholder, in text or anywhere in JSON-like data."""

    def __init__(self, secrets: dict[str, str] | None = None) -> None:
        self.secrets = dict(secrets or {})  # name -> value
        by_value: dict[str, str] = {}
        for name, value in self.secrets.items():
            by_value.setdefault(value, name)
        self._names = by_value
        # One pass, longest value first: a value inside another is not half-replaced, and a
        # placeholder already written is never matched again.
        values = sorted(by_value, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    @classmethod
    def joined(cls, redactors: Iterable[Redactor]) -> Redactor:
        """One redactor for every secret of several (hosts' variables may differ): a name's
        values from each are all replaced. For logs; `reveal` stays with each host's own."""
        out = cls()
        by_value: dict[str, str] = {}
        for redactor in redactors:
            out.secrets.update(redactor.secrets)
            for value, name in redactor._names.items():
                by_value.setdefault(value, name)
        out._names = by_value
        values = sorted(by_value, key=len, reverse=True)
        out._pattern = re.compile("|".join(map(re.escape, values))) if values else None
        return out

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: placeholder(self._names[m.group()]), text)

    def value(self, data: Any) -> Any:
        """A copy of data (dicts, lists, strings, numbers) with every string redacted."""
        if self._pattern is None:
            return data
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self.value(k): self.value(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.value(v) for v in data]
        return data

    def reveal(self, text: str) -> tuple[str, list[str]]:
        """The inverse of text(): placeholders back to values, and the names it has no value for."""
        unknown: list[str] = []

        def value_of(m: re.Match[str]) -> str:
            if m.group(1) in self.secrets:
                return self.secrets[m.group(1)]
            unknown.append(m.group(1))
            return m.group()

        return _PLACEHOLDER.sub(value_of, text), unknown


def find_secrets(variables: dict[str, Any], marked: Iterable[str], commands: Iterable[list[str]] = (),
                 envs: Iterable[dict[str, str]] = ()) -> dict[str, str]:
    """name -> value of every secret: variables marked or named so, env values and flag arguments
    named so. Empty values and booleans are nothing to hide."""
    found: dict[str, str] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                add(f"{name}.{key}", item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
        elif value is not None and not isinstance(value, bool) and str(value):
            found.setdefault(name, str(value))

    marked = set(marked)
    for name, value in variables.items():
        if name in marked or is_secret_name(name):
            add(name, value)
    for env in envs:
        for name, value in env.items():
            if is_secret_name(name):
                add(name, value)
    for argv in commands:
        for i, word in enumerate(argv):
            flag, eq, inline = word.partition("=")
            if not flag.startswith("-") or not is_secret_name(flag):
                continue
            if eq:
                add(flag.lstrip("-"), inline)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):  # else a switch: --use-api-key --port
                add(flag.lstrip("-"), argv[i + 1])
    return found
