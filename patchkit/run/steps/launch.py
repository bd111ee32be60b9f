"""The launch step: a supervised server (vLLM, SGLang) with health, readiness and
speculative-decoding gates.

"It came up" is not the bar: the seed of this project was an EAGLE-3 server that
started fine and ran at 0.66x of plain decoding. So after health and readiness the
step can measure the acceptance rate from the server's own Prometheus counters and,
optionally, throughput against the same model without speculation.

Every probe and request is made by the host agent, from the host's side: a server
bound to 127.0.0.1 works over SSH, and timings carry no control-side round trips.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import Field, field_validator, model_validator

from patchkit.host.agent.protocol import (
    HTTP,
    HTTP_BATCH,
    LAUNCH_INSPECT,
    LAUNCH_RESOLVES,
    LAUNCH_START,
    LAUNCH_STOP,
    LOG_TAIL,
    MANIFEST,
    HttpRequest,
    LaunchInspectReply,
    LaunchStopReply,
    PatchedFile,
)
from patchkit.base.errors import HostError
from patchkit.recipe.model import BindError, KindSpec, Step, Strict
from patchkit.recipe.redact import Redactor
from patchkit.run.results import LaunchDetails, LaunchServer, RunRecord, StepResult
from patchkit.run.steps.context import HostContext
from patchkit.run.steps.gate_stats import Acceptance, below, regressed, show_interval
from patchkit.run.steps.kind import Planned, StepKind, Undone
from patchkit.run.steps.spec_sources import (
    SOURCES,
    Engine,
    base_url,
    count_source,
    engine_of,
    served_model_ids,
)
from patchkit.run.steps.staleness import FileEdit, Stale, last_change, stale_change

if TYPE_CHECKING:  # for annotations: validating a recipe does not load the running agent
    from patchkit.host.agent.client import AgentClient

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


class LaunchStep(KindSpec):
    restarts = True

    command: list[str] = Field(min_length=1, description="argv, no shell; a first word python/python3 means the target interpreter")
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    log: str | None = Field(None, description="log file on the host (default: <state_dir>/launch/<step>.log)")
    health: Health
    ready: Ready | None = None
    spec_decode: SpecDecodeGate | None = None
    baseline: Baseline | None = None
    stop_timeout_s: float = Field(30, gt=0)
    engine: Engine | None = Field(None, description=(
        "the serving engine, for the spec_decode gate's requests and counts: vllm (OpenAI completions, "
        "its Prometheus spec-decode counters) or sglang (native /generate, each request's meta_info); "
        "default: sglang when the command runs sglang.launch_server or an sglang executable, else vllm"))

    _argv = field_validator("command", "env", mode="before")(classmethod(lambda cls, v: _words(v)))

    @model_validator(mode="after")
    def _baseline_needs_gate(self) -> "LaunchStep":
        if self.baseline and not self.spec_decode:
            raise ValueError("`baseline` compares throughput on the spec_decode prompts: add `spec_decode`")
        return self

    def bind(self, folder: Path) -> None:
        if self.spec_decode and self.spec_decode.prompts_file is not None:
            try:
                self.spec_decode.bind(folder)
            except ValueError as exc:
                raise BindError(("spec_decode", "prompts_file"), str(exc)) from None

    def secret_words(self) -> tuple[list[list[str]], list[dict[str, str]]]:
        return [self.command, self.baseline.command if self.baseline else []], [self.env]


class GateFailed(Exception):
    """A launch gate said no; the message says why, with numbers."""


def resolved_argv(command: list[str], ctx: HostContext) -> list[str]:
    if command[0] in ("python", "python3"):
        return [ctx.agent.info.get("python", command[0]), *command[1:]]
    return list(command)


# pbkdf2 rounds for the part of a command hash that covers env values and secret arguments:
# the hash sits in journals and JSON reports, and a short password must not be guessable
# from it. Paid once per launch step per host, off the event loop.
_SECRET_ROUNDS = 100_000


@dataclass(frozen=True)
class ServerCommand:
    """A server's command line. argv and env hold the real values and go only to the host's
    launch_start; records, logs and reports get shown_argv and the env's names."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    shown_argv: list[str]
    salt: str  # hex, kept in the server's record so the same command hashes the same again

    def _hash(self) -> str:
        if not self.env and self.argv == self.shown_argv:  # nothing secret: the hash records always had
            return hashlib.sha256(json.dumps([self.argv, [], self.cwd]).encode()).hexdigest()
        material = json.dumps([self.argv, sorted(self.env.items())]).encode()
        hidden = hashlib.pbkdf2_hmac("sha256", material, bytes.fromhex(self.salt), _SECRET_ROUNDS).hex()
        return hashlib.sha256(json.dumps([self.shown_argv, sorted(self.env), self.cwd, hidden]).encode()).hexdigest()

    async def command_hash(self) -> str:
        """Changes with any argument or env value, and gives none of them away."""
        import asyncio

        return await asyncio.to_thread(self._hash)


def server_command(ctx: HostContext, command: list[str], env: dict[str, str], cwd: str | None,
                   salt: str | None = None) -> ServerCommand:
    argv = resolved_argv(command, ctx)
    return ServerCommand(argv, dict(env), cwd, ctx.loaded.redactor.value(argv), salt or secrets.token_hex(16))


def public_record(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A server record fit for the journal: records written before env values were kept out
    of them still hold those values; only their names stay."""
    if not record or "env" not in record:
        return record
    out = {k: v for k, v in record.items() if k != "env"}
    out["env_names"] = sorted(record["env"] or {})
    return out


async def _inspect(agent: AgentClient, state_dir: str, name: str, health: Health | None) -> LaunchInspectReply:
    request_timeout = health.request_timeout_s if health else 5.0
    return await agent.call(LAUNCH_INSPECT({"state_dir": state_dir, "name": name, "url": health.url if health else None,
                                            "request_timeout": request_timeout}), reply_wait=request_timeout + 60)


def _healthy(info: LaunchInspectReply) -> bool:
    health = info["health"]
    return health is not None and health["status"] == 200


async def _log_tail(agent: AgentClient, path: str | None) -> str:
    """The errors the log mentions (root causes sit far above the last line), then its tail."""
    if not path:
        return ""
    found = await agent.call(LOG_TAIL({"path": path, "lines": 30}))
    errors = found.get("errors") or []
    head = ("errors in the log:\n" + "\n".join(errors) + "\n--- last lines:\n") if errors else ""
    return head + found["tail"]


async def wait_healthy(agent: AgentClient, state_dir: str, name: str, health: Health) -> float:
    """Seconds until the health URL answered 200; HostError with the log tail otherwise."""
    from tenacity import AsyncRetrying, RetryError, retry_if_result, stop_after_delay, wait_exponential

    started = time.monotonic()
    last: dict[str, Any] = {}

    async def probe() -> bool:
        info = await _inspect(agent, state_dir, name, health)
        last.update(info)
        if not info["running"]:
            tail = await _log_tail(agent, (info.get("record") or {}).get("log"))
            raise HostError(f"{name} exited before it was healthy ({info['exit']}); last lines of its log:\n{tail}")
        return _healthy(info)

    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_result(lambda healthy: not healthy),
            wait=wait_exponential(multiplier=health.interval_s, max=max(health.interval_s, 5)),
            stop=stop_after_delay(health.timeout_s),
        ):
            with attempt:
                healthy = await probe()
            if attempt.retry_state.outcome is not None and not attempt.retry_state.outcome.failed:
                attempt.retry_state.set_result(healthy)
    except RetryError:
        probe_result = (last.get("health") or {})
        seen = probe_result.get("status") or probe_result.get("error") or "no answer"
        tail = await _log_tail(agent, (last.get("record") or {}).get("log"))
        raise HostError(f"{name} not healthy after {health.timeout_s:g}s ({health.url}: {seen}); "
                        f"last lines of its log:\n{tail}") from None
    return time.monotonic() - started


async def _models(agent: AgentClient, url: str) -> list[str]:
    try:
        return await served_model_ids(agent, url)
    except ValueError as exc:
        raise GateFailed(str(exc)) from None


async def check_ready(agent: AgentClient, spec: LaunchStep, redactor: Redactor) -> str:
    if spec.ready is None:
        return ""
    notes = []
    if spec.ready.model:
        models = await _models(agent, spec.health.url)
        if spec.ready.model not in models:
            raise GateFailed(f"/v1/models lists {models}, not {spec.ready.model!r}")
        notes.append(f"serves {spec.ready.model}")
    if spec.ready.completion:
        model = spec.ready.model or (await _models(agent, spec.health.url))[0]
        body = {"model": model, "prompt": spec.ready.completion.prompt,
                "max_tokens": spec.ready.completion.max_tokens, "temperature": 0}
        wait = spec.ready.completion.timeout_s  # the request's own limit on the host; this side waits longer
        reply = await agent.call(HTTP({"method": "POST", "url": base_url(spec.health.url) + "/v1/completions",
                                       "body": body, "timeout": wait}), reply_wait=wait + 60)
        if reply.get("status") != 200:
            raise GateFailed(f"smoke completion failed: {reply.get('status') or reply.get('error')}: "
                             f"{_clip(redactor, reply.get('body'))}")
        notes.append("smoke completion ok")
    return ", ".join(notes)


def _clip(redactor: Redactor, body: str | None, limit: int = 300) -> str:
    """The start of a server's answer; redacted first, so a cut never leaves half a secret."""
    return redactor.text(body or "")[:limit]


def prompts_sha256(gate: SpecDecodeGate) -> str:
    """What makes two measurements comparable: the prompts and how they are sampled."""
    return hashlib.sha256(json.dumps([gate.prompts, gate.max_tokens, gate.temperature, gate.seed]).encode()).hexdigest()


async def measure(agent: AgentClient, url: str, gate: SpecDecodeGate, redactor: Redactor,
                  engine: Engine = "vllm") -> dict[str, Any]:
    """Send the gate's prompts, again from the first, until `min_draft_tokens` drafted tokens
    were verified (or max_prompts / timeout_s): acceptance over exactly these requests, counted
    by the engine's source (spec_sources), tokens/s timed on the host."""
    source = count_source(engine, agent, url)
    try:
        await source.start(gate.model)
    except ValueError as exc:
        raise GateFailed(str(exc)) from None
    started = time.monotonic()
    sent, tokens, seconds = 0, 0, 0.0
    measured: Acceptance | None = None
    while True:
        count = min(len(gate.prompts), gate.max_prompts - sent)
        requests: list[HttpRequest] = [
            source.request(gate.prompts[n % len(gate.prompts)], gate.max_tokens, gate.temperature,
                           gate.seed + n if gate.seed is not None else None)
            for n in range(sent, sent + count)]
        batch = await agent.call(HTTP_BATCH({"requests": requests}), reply_wait=3600)
        sent += count
        failed = [r for r in batch["results"] if r.get("status") != 200]
        if failed:
            first = failed[0]
            raise GateFailed(f"{len(failed)} of {len(requests)} requests failed: "
                             f"{first.get('status') or first.get('error')} {_clip(redactor, first.get('body'))}")
        bodies = [json.loads(r["body"]) for r in batch["results"]]
        tokens += sum(source.completion_tokens(b) for b in bodies)
        source.add(bodies)
        seconds += batch["seconds"]
        measured = await source.acceptance()
        if measured is None:
            break
        if (measured.draft_tokens >= gate.min_draft_tokens or measured.draft_tokens == 0
                or sent >= gate.max_prompts or time.monotonic() - started >= gate.timeout_s):
            break
    out: dict[str, Any] = {"engine": engine, "completion_tokens": tokens, "seconds": round(seconds, 3),
                           "prompts_sent": sent, "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
                           "prompts_sha256": prompts_sha256(gate)}
    if measured is not None:
        rate = measured.rate
        out.update({"draft_tokens": measured.draft_tokens, "accepted_tokens": measured.accepted_tokens,
                    "drafts": measured.drafts, "acceptance_rate": rate,
                    "mean_acceptance_length": measured.mean_acceptance_length,
                    "per_position": [round(p, 4) for p in measured.per_position] if measured.per_position else None})
        if rate is not None:
            low, high = measured.interval()
            out["acceptance_interval"] = [round(low, 4), round(high, 4)]
            out["effective_trials"] = round(measured.effective_trials(), 1)
            length = measured.length_interval()
            if length is not None:
                out["mean_acceptance_length_interval"] = [round(length[0], 3), round(length[1], 3)]
            engine_says = await source.cross_check(measured)
            if engine_says:
                out["engine_figures"] = engine_says
    return out


def _log_path(ctx: HostContext, step_name: str, spec_log: str | None) -> str:
    return spec_log or posixpath.join(ctx.journal.state_dir, "launch", f"{step_name}.log")


async def _start(agent: AgentClient, state_dir: str, name: str, cmd: ServerCommand, command_hash: str,
                 log: str, run_id: str) -> LaunchServer:
    started = await agent.call(LAUNCH_START({
        "state_dir": state_dir, "name": name, "argv": cmd.argv, "env": cmd.env, "cwd": cmd.cwd, "log_path": log,
        "command_hash": command_hash, "shown_argv": cmd.shown_argv, "salt": cmd.salt, "run_id": run_id}))
    return LaunchServer.model_validate(started)


async def _stop(ctx: HostContext, name: str, timeout_s: float) -> LaunchStopReply:
    return await ctx.agent.call(LAUNCH_STOP({"state_dir": ctx.journal.state_dir, "name": name, "timeout_s": timeout_s}),
                                reply_wait=timeout_s + 60)


# What a launch's plan hands its apply: the result, what the host said of the server, its command.
LaunchPlan = tuple[StepResult, LaunchInspectReply, ServerCommand]


def when(epoch: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(epoch))) if epoch is not None else "at an unknown time"


def _this_run(ctx: HostContext) -> RunRecord:
    """The run in progress on this host, as far as it got: its earlier steps' changes count."""
    return RunRecord(run_id=ctx.run_id, kind="apply", recipe=ctx.loaded.recipe.name, recipe_sha256="", host=ctx.host,
                     patchkit_version="", started=time.time(), steps=list(ctx.done))


def _notified(ctx: HostContext, step: Step, records: list[RunRecord]) -> list[RunRecord]:
    """With `notify:` naming this launch step, this recipe's changes count only from the steps
    that notify it (another recipe's changes always count: it cannot vouch for them)."""
    notifiers = {s.name for s in ctx.loaded.recipe.steps if step.name in s.notify}
    if not notifiers:
        return records
    return [r.model_copy(update={"steps": [s for s in r.steps if s.name in notifiers or s.kind == "launch"]})
            if r.recipe == ctx.loaded.recipe.name else r for r in records]


async def staleness(ctx: HostContext, step: Step, record: dict[str, Any]) -> tuple[Stale | None, Stale | None]:
    """(why the running server is stale or None, the newest change journaled on the host)."""
    records = await ctx.journal.runs(None)  # every recipe's: another one may patch what this one serves
    current, *journaled = _notified(ctx, step, [_this_run(ctx), *records])
    return stale_change(record, step.name, journaled, current), last_change(journaled, current)


async def patched_files(ctx: HostContext) -> list[PatchedFile]:
    """The files the recipe's patch steps keep patched on this host: those this run wrote or found
    in place so far, then those its journal names as still changed."""
    from patchkit.run.steps.patch import PatchStep
    from patchkit.run.steps.unit import unit_files

    packages = {s.name: p.package for s in ctx.loaded.recipe.steps if (p := PatchStep.of(s)) and p.package}
    found: dict[str, PatchedFile] = {}
    journaled = [(s, True) for r in sorted(await ctx.records(), key=lambda r: r.run_id) for s in r.live_steps()]
    for done, _ in [(s, False) for s in ctx.done] + journaled:
        package = packages.get(done.name)
        if done.kind != "patch" or package is None or done.status not in ("changed", "ok"):
            continue
        for change in unit_files(done):
            if change.sha256_after is not None and change.file.endswith(".py"):
                found.setdefault(change.file, {"package": package, "file": change.file, "root": done.root})
    return list(found.values())


async def other_copies(ctx: HostContext, cmd: ServerCommand) -> str | None:
    """Why the server would not run what the patch steps wrote (it imports another copy), or None."""
    files = await patched_files(ctx)
    if not files:
        return None
    seen = await ctx.agent.call(LAUNCH_RESOLVES({"argv": cmd.argv, "env": cmd.env, "cwd": cmd.cwd, "files": files}),
                                reply_wait=180)
    if seen["error"]:
        return f"cannot tell which files the server would import ({seen['error']})"
    if not seen["other"]:
        return None
    where = f" (its interpreter {seen['python']}, env {', '.join(sorted(cmd.env)) or 'none'}, cwd {cmd.cwd or 'the agent'})"
    return "; ".join(f"the server would import {o['module']} from {o['imports']}; patchkit wrote {o['wrote']}"
                     for o in seen["other"]) + where


async def plan_launch(ctx: HostContext, step: Step, spec: LaunchStep) -> LaunchPlan:
    result = StepResult(name=step.name, kind="launch", status="changed", file=spec.health.url)
    info = await _inspect(ctx.agent, ctx.journal.state_dir, step.name, spec.health)
    record = info.get("record") or {}
    cmd = server_command(ctx, spec.command, spec.env, spec.cwd, record.get("salt"))
    wanted = await cmd.command_hash()
    healthy = _healthy(info)
    stale, newest = (await staleness(ctx, step, record)) if info["running"] else (None, None)
    if stale is not None and record.get("command_hash") == wanted:
        result.message = "restart onto the code on disk: " + stale.describe(record.get("pid"), when(record.get("started")))
    elif info["running"] and record.get("command_hash") == wanted and healthy:
        result.status = "ok"
        result.message = f"running and healthy (pid {record['pid']})"
    elif info["running"] and record.get("command_hash") == wanted:
        health = info["health"]
        result.message = f"running (pid {record['pid']}) but unhealthy: " \
                         f"{(health['status'] or health.get('error')) if health else None}"
    elif info["running"]:
        result.message = f"a different command runs as {step.name} (pid {record['pid']}): restart"
    else:
        ended = info["exit"] if info["exit"] not in (None, "not running") else "no longer running"
        result.message = f"{ended} (pid {record.get('pid')})" if record else "not started yet"
    result.details = {"pid": record.get("pid"), "running": info["running"], "healthy": healthy,
                      "same_command": record.get("command_hash") == wanted, "log": record.get("log"),
                      "command_hash": wanted}
    other = await other_copies(ctx, cmd)
    if other:
        result.details["other_copy"] = other
    if info["running"]:
        result.details["started"] = record.get("started")
        result.details["stale"] = stale.describe(record.get("pid"), when(record.get("started"))) if stale else None
        if newest is not None:
            result.details["last_change"] = {"run_id": newest.run_id, "step": newest.step, "file": newest.file}
    return result, info, cmd


async def apply_launch(ctx: HostContext, step: Step, spec: LaunchStep, planned: LaunchPlan) -> StepResult:
    result, info, cmd = planned
    result = result.model_copy(deep=True)
    record = info.get("record") or {}
    other = (result.details or {}).get("other_copy")
    if other:  # the patch is not what it would run: started, it would serve the old code as "applied"
        result.status = "failed"
        running = f"; the running server (pid {record.get('pid')}) was left as it is" if info["running"] else ""
        result.message = (f"{other}: {'would not start' if ctx.dry_run else 'not started'}{running} (patchkit "
                          "does not patch a second copy: point the launch's PYTHONPATH/cwd at the patched one)")
        return result
    if result.status == "ok" or ctx.dry_run:
        if ctx.dry_run and result.status == "changed":
            result.message = ("would " if result.message.startswith("restart") else "would start: ") + result.message
        return result
    record = info.get("record") or {}
    wanted = (result.details or {})["command_hash"]
    replaced = None
    stale = (result.details or {}).get("stale")
    if info["running"]:
        if record.get("command_hash") != wanted and ctx.no_restart:
            result.status = "failed"
            result.message = (f"a different command runs as {step.name} (pid {record['pid']}); "
                              "--no-restart refuses to replace it")
            return result
        if stale and ctx.no_restart:
            result.status, result.message = "stale", f"stale: {stale} (--no-restart)"
            return result
        stopped = await _stop(ctx, step.name, spec.stop_timeout_s)
        replaced = public_record(stopped.get("record"))
    log = _log_path(ctx, step.name, spec.log)
    started = await _start(ctx.agent, ctx.journal.state_dir, step.name, cmd, wanted, log, ctx.run_id)
    details = LaunchDetails(servers=[started], replaced=LaunchServer.model_validate(replaced) if replaced else None,
                            log=log)
    try:
        details.startup_s = round(await wait_healthy(ctx.agent, ctx.journal.state_dir, step.name, spec.health), 1)
        notes = [f"healthy after {details.startup_s}s (pid {started.pid})"]
        if stale:
            notes.insert(0, f"restarted onto the code on disk ({stale})")
        ready = await check_ready(ctx.agent, spec, ctx.loaded.redactor)
        if ready:
            notes.append(ready)
        if spec.spec_decode:
            notes.append(await _spec_gate(ctx, step, spec, details))
    except (HostError, GateFailed) as exc:
        result.status = "failed"
        result.message = str(exc)
        try:  # also when it died: workers it started may still run in its process group
            stopped = await _stop(ctx, step.name, spec.stop_timeout_s)
            details.stopped_after_failure, details.stop = bool(stopped.get("stopped")), stopped.get("how")
        except HostError as stop_exc:
            details.stopped_after_failure, details.stop = False, f"could not stop it: {stop_exc}"
        result.details = details.as_json()
        return result
    result.message = "; ".join(n for n in notes if n)
    if details.gate_failed:
        result.status = "failed"
    result.details = details.as_json()
    return result


def served_models(argv: list[str]) -> tuple[str | None, str | None]:
    """(model, drafter) a vLLM or SGLang command line serves, as given there."""
    model = drafter = None

    def value(i: int, flag: str) -> str | None:
        word = argv[i]
        if word == flag:
            return argv[i + 1] if i + 1 < len(argv) else None
        return word.split("=", 1)[1] if word.startswith(flag + "=") else None

    for i, word in enumerate(argv):
        if word == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            model = model or argv[i + 1]
        for flag in ("--model", "--model-path"):
            model = value(i, flag) or model
        drafter = value(i, "--speculative-draft-model-path") or drafter
        for flag in ("--speculative-config", "--speculative_config"):
            config = value(i, flag)
            if config:
                try:
                    found = json.loads(config)
                except ValueError:
                    found = None
                if isinstance(found, dict) and isinstance(found.get("model"), str):
                    drafter = found["model"]
    return model, drafter


async def _tree_sha256(ctx: HostContext, path: str | None) -> str | None:
    """One hash of a model folder's files on the host (the deploy step's hash cache makes a
    second look at an unchanged folder cheap); a name that is no path (a hub id) is itself."""
    if not path:
        return None
    found = await ctx.agent.call(MANIFEST({"dest": path, "cache_file": posixpath.join(ctx.journal.state_dir,
                                                                                       "hashcache.json")}),
                                 reply_wait=3600)
    if not found["exists"]:
        return "name:" + path
    listing = sorted((rel, f["sha256"]) for rel, f in found["files"].items())
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


async def gate_identity(ctx: HostContext, spec: LaunchStep) -> dict[str, str | None]:
    """What a measurement is comparable by: the model's, the drafter's and the prompts' hashes."""
    assert spec.spec_decode is not None
    model, drafter = served_models(ctx.loaded.redactor.value(spec.command))
    # Hashing a model's files costs a read of all of them the first time (hundreds of GB for a
    # large target; the hash cache spares later runs): only a gate that compares pays it.
    hashed = spec.spec_decode.max_regression is not None
    return {"model": model, "model_sha256": await _tree_sha256(ctx, model) if hashed else None,
            "drafter": drafter, "drafter_sha256": await _tree_sha256(ctx, drafter) if hashed else None,
            "prompts_sha256": prompts_sha256(spec.spec_decode)}


_COMPARABLE = ("model_sha256", "drafter_sha256", "prompts_sha256")


def last_good(records: list[RunRecord], identity: dict[str, str | None], run_id: str) -> tuple[str, dict[str, Any]] | None:
    """(run id, figures) of the newest passing gate on this host with the same hashes."""
    for record in sorted(records, key=lambda r: r.run_id, reverse=True):
        if record.run_id == run_id or record.kind != "apply":
            continue
        for step in record.steps:
            figures = (step.details or {}).get("spec_decode") if step.kind == "launch" else None
            if not isinstance(figures, dict) or not figures.get("passed"):
                continue
            theirs = figures.get("identity") or {}
            if theirs.get("model_sha256") and all(theirs.get(k) == identity.get(k) for k in _COMPARABLE):
                return record.run_id, figures
    return None


def _evidence(measured: dict[str, Any], gate: SpecDecodeGate) -> str:
    return (f"{int(measured['accepted_tokens'])} of {int(measured['draft_tokens'])} drafted tokens accepted "
            f"over {measured['prompts_sent']} prompts")


def _engine_says(measured: dict[str, Any]) -> str:
    """The engine's own summary beside the gate's exact figure: it averages over another window
    (SGLang's gauge: its last logging interval; its server info: the server's life)."""
    figures, mal = measured.get("engine_figures") or {}, measured.get("mean_acceptance_length")
    said = []
    for key, what in (("metrics_spec_accept_length", "its /metrics gauge sglang:spec_accept_length"),
                      ("server_avg_spec_accept_length", "its server-lifetime avg_spec_accept_length")):
        value = figures.get(key)
        if value is None or mal is None:
            continue
        off = abs(value - mal) > 0.15 * mal
        said.append(f"{what} {value:.2f}" + (" (DISAGREES with these requests' figure)" if off else ""))
    return ("; SGLang's own figures: " + ", ".join(said)) if said else ""


async def _spec_gate(ctx: HostContext, step: Step, spec: LaunchStep, details: LaunchDetails) -> str:
    gate = spec.spec_decode
    assert gate is not None
    engine = engine_of(spec.command, spec.engine)
    measured = await measure(ctx.agent, spec.health.url, gate, ctx.loaded.redactor, engine)
    measured["identity"] = await gate_identity(ctx, spec)
    measured["passed"] = False
    details.spec_decode = measured
    rate, mal = measured.get("acceptance_rate"), measured.get("mean_acceptance_length")
    if rate is None:
        raise GateFailed(f"no draft tokens were proposed: is speculative decoding on? {SOURCES[engine].no_drafts}")
    interval = (measured["acceptance_interval"][0], measured["acceptance_interval"][1])
    rule = f"fail_when: {gate.fail_when}"
    bound = "upper" if gate.fail_when == "upper" else "lower"
    note = f"acceptance {rate:.1%} ({show_interval(interval)}), mean acceptance length {mal:.2f}"
    if measured.get("per_position"):
        note += " (per position " + ", ".join(f"{p:.2f}" for p in measured["per_position"]) + ")"
    note += f", {measured['tokens_per_s']} tok/s"
    note += _engine_says(measured)
    if measured["draft_tokens"] < gate.min_draft_tokens:
        note += (f"; only {int(measured['draft_tokens'])} of the {gate.min_draft_tokens} drafted tokens asked for "
                 f"(max_prompts {gate.max_prompts} / timeout_s {gate.timeout_s:g} reached)")
    problems = []
    if gate.min_acceptance_rate is not None and below(interval, gate.min_acceptance_rate, gate.fail_when):
        problems.append(f"acceptance rate {rate:.2%} ({show_interval(interval)}) is below "
                        f"{gate.min_acceptance_rate:.0%}: the interval's {bound} bound is ({rule})")
    length = measured.get("mean_acceptance_length_interval")
    if gate.min_mean_acceptance_length is not None and mal is not None and length is not None \
            and below((length[0], length[1]), gate.min_mean_acceptance_length, gate.fail_when):
        problems.append(f"mean acceptance length {mal:.2f} ({show_interval((length[0], length[1]), False)}) is below "
                        f"{gate.min_mean_acceptance_length}: the interval's {bound} bound is ({rule})")
    previous = None
    if gate.max_regression is not None:
        previous = last_good(await ctx.journal.runs(None), measured["identity"], ctx.run_id)
        if previous is None:
            note += "; no earlier passing gate with the same model, drafter and prompts to compare with"
        else:
            then_id, then = previous
            floor = then["acceptance_rate"] * (1 - gate.max_regression)
            measured["regression_baseline"] = {"run_id": then_id, "acceptance_rate": then["acceptance_rate"],
                                               "speedup": then.get("speedup")}
            compared = (f"run {then_id}'s {then['acceptance_rate']:.1%} (the last passing gate on this host with "
                        f"the same model, drafter and prompts; floor {floor:.1%})")
            if regressed(interval, then["acceptance_rate"], gate.max_regression, gate.fail_when):
                problems.append(f"acceptance {rate:.1%} ({show_interval(interval)}) in run {ctx.run_id} is more than "
                                f"{gate.max_regression:.0%} below {compared} ({rule})")
            else:
                note += f"; within {gate.max_regression:.0%} of {compared}"
    if problems:
        raise GateFailed("; ".join(problems) + f" ({_evidence(measured, gate)})")
    if spec.baseline:
        note += "; " + await _baseline(ctx, step, spec, details)
        measured["speedup"] = details.speedup
        then_speedup = previous[1].get("speedup") if previous else None
        if gate.max_regression is not None and previous and then_speedup and details.speedup is not None \
                and details.speedup < then_speedup * (1 - gate.max_regression):
            details.gate_failed = True
            note = (f"speedup {details.speedup:.2f}x is more than {gate.max_regression:.0%} below run "
                    f"{previous[0]}'s {then_speedup:.2f}x; {note}")
    measured["passed"] = not details.gate_failed
    return note


async def _baseline(ctx: HostContext, step: Step, spec: LaunchStep, details: LaunchDetails) -> str:
    base = spec.baseline
    assert base is not None and spec.spec_decode is not None and details.spec_decode is not None
    name = f"{step.name}-baseline"
    log = _log_path(ctx, name, None)
    cmd = server_command(ctx, base.command, spec.env, spec.cwd)
    started = await _start(ctx.agent, ctx.journal.state_dir, name, cmd, await cmd.command_hash(), log, ctx.run_id)
    details.servers.append(started)
    await wait_healthy(ctx.agent, ctx.journal.state_dir, name, base.health)
    plain = await measure(ctx.agent, base.health.url, spec.spec_decode, ctx.loaded.redactor,
                          engine_of(base.command, spec.engine))
    details.baseline = plain
    spec_tps = details.spec_decode["tokens_per_s"] or 0.0
    speedup = spec_tps / plain["tokens_per_s"] if plain["tokens_per_s"] else None
    details.speedup = round(speedup, 3) if speedup is not None else None
    keep = base.keep if base.keep != "faster" else ("speculative" if (speedup or 0) >= 1 else "baseline")
    if keep == "speculative":
        await _stop(ctx, name, spec.stop_timeout_s)
        details.servers = [s for s in details.servers if s.name != name]
    else:
        await _stop(ctx, step.name, spec.stop_timeout_s)
        details.servers = [s for s in details.servers if s.name != step.name]
    details.kept = keep
    note = f"speedup {speedup:.2f}x over no speculation ({plain['tokens_per_s']} tok/s); kept the {keep} server"
    if base.min_speedup is not None and (speedup or 0) < base.min_speedup:
        details.gate_failed = True
        note = f"speculation is SLOWER than required: {note} (min_speedup {base.min_speedup})"
    return note


async def undo_launch(agent: AgentClient, state_dir: str, step: StepResult, force: bool,
                      redactor: Redactor, env: dict[str, str], run_id: str, health: Health | None = None) -> Undone:
    """Stop the servers a run started (if they are still the ones it started); restart what it
    replaced, and wait until it is healthy by the recipe's `health` (None: the recipe has no such
    launch step any more; the restart is then reported unchecked).

    redactor and env are those of the recipe being rolled back: the journal holds no secret or
    env value, so the replaced server gets its values from there, and only if they hash to the
    command it ran.
    """
    details = LaunchDetails.model_validate(step.details or {})
    notes, ok = [], True
    for server in details.servers:
        info = await agent.call(LAUNCH_INSPECT({"state_dir": state_dir, "name": server.name}))
        current = info.get("record") or {}
        if not info["running"]:
            notes.append(f"{server.name} already stopped")
            continue
        if current.get("pid") != server.pid and not force:
            ok = False
            notes.append(f"{server.name} is now pid {current.get('pid')}, not the pid {server.pid} this run "
                         "started; left running (--force stops it)")
            continue
        stopped = await agent.call(LAUNCH_STOP({"state_dir": state_dir, "name": server.name, "timeout_s": 30}),
                                   reply_wait=120)
        notes.append(f"stopped {server.name} (pid {server.pid}, {stopped['how']})")
    previous = details.replaced
    if previous and ok:
        restarted = await _restart(agent, state_dir, previous, redactor, env, run_id, health)
        ok = restarted.ok
        notes.append(restarted.message)
    return Undone(ok, "; ".join(notes) or "nothing to stop")


async def _restart(agent: AgentClient, state_dir: str, previous: LaunchServer, redactor: Redactor,
                   env: dict[str, str], run_id: str, health: Health | None) -> Undone:
    shown = list(previous.argv)
    revealed = [redactor.reveal(word) for word in shown]
    unknown = sorted({name for _, names in revealed for name in names})
    # env_names; a record from before env values were kept out of records has only `env`
    names = previous.env_names if "env_names" in previous.model_fields_set else sorted(previous.env or {})
    missing = [n for n in names if n not in env]
    refused = f"the server it replaced (pid {previous.pid}) was not restarted: "
    if unknown or missing:
        lacking = [f"<secret:{n}>" for n in unknown] + [f"env {n}" for n in missing]
        return Undone(False, refused + (f"this recipe has no value for {', '.join(lacking)} (patchkit keeps none); "
                                        "roll back again with the recipe or -e values it ran with"))
    cmd = ServerCommand([word for word, _ in revealed], {n: env[n] for n in names}, previous.cwd, shown,
                        previous.salt or secrets.token_hex(16))
    if await cmd.command_hash() != previous.command_hash:
        what = [f"env {n}" for n in names] + (["its secret arguments"] if cmd.argv != shown else [])
        return Undone(False, refused + (f"this recipe's values for {', '.join(what) or 'its command'} are not the "
                                        "ones it ran with (patchkit keeps none of them); roll back again with the "
                                        "recipe or -e values it ran with"))
    again = await _start(agent, state_dir, previous.name, cmd, previous.command_hash, previous.log, run_id)
    if health is None:
        return Undone(True, f"restarted the server it replaced (pid {again.pid}; not health-checked: "
                            "this recipe has no such launch step)")
    try:
        seconds = await wait_healthy(agent, state_dir, previous.name, health)
    except HostError as exc:
        return Undone(False, f"restarted the server it replaced (pid {again.pid}), but it is not healthy: {exc}")
    return Undone(True, f"restarted the server it replaced (pid {again.pid}), healthy after {seconds:.1f}s")


def last_gate(records: list[RunRecord], step_name: str) -> tuple[str, dict[str, Any]] | None:
    """(run id, figures) of the newest measurement of this launch step's gate in the journal."""
    for record in sorted(records, key=lambda r: r.run_id, reverse=True):
        for step in record.steps:
            figures = (step.details or {}).get("spec_decode") if step.kind == "launch" else None
            if step.name == step_name and isinstance(figures, dict) and figures.get("acceptance_rate") is not None:
                return record.run_id, figures
    return None


def gate_summary(figures: dict[str, Any]) -> str:
    text = f"acceptance {figures['acceptance_rate']:.1%}"
    if figures.get("acceptance_interval"):
        low, high = figures["acceptance_interval"]
        text += f" ({show_interval((low, high))})"
    if figures.get("mean_acceptance_length") is not None:
        text += f", mean acceptance length {figures['mean_acceptance_length']:.2f}"
    if figures.get("per_position"):
        text += " (per position " + ", ".join(f"{p:.2f}" for p in figures["per_position"]) + ")"
    passed = figures.get("passed")
    return text + ("" if passed is None else ", passed" if passed else ", failed")


def launch_state(planned: StepResult) -> StepResult:
    """running and healthy -> applied; running code older than the disk -> stale; the same
    command running, unhealthy -> drifted; another command running or none -> pending."""
    out = planned.model_copy(deep=True)
    details = planned.details or {}
    if details.get("other_copy") and details.get("running") and details.get("same_command"):
        out.status, out.message = "stale", f"stale: {details['other_copy']}"
    elif details.get("stale") and details.get("same_command"):
        out.status, out.message = "stale", f"stale: {details['stale']}"
    elif planned.status == "ok":
        last = details.get("last_change")
        since = (f"; started after the last change (run {last['run_id']} changed {last['file']})" if last
                 else "; no change journaled on this host")
        out.status = "applied"
        out.message = f"running, healthy (pid {details.get('pid')}, started {when(details.get('started'))}){since}"
    elif details.get("running") and details.get("same_command"):
        out.status, out.message = "drifted", f"unhealthy: {planned.message}"
    elif details.get("running"):
        out.status = "pending"
    else:
        out.status, out.message = "pending", f"stopped: {planned.message}"
    return out


class LaunchKind(StepKind[LaunchStep, LaunchPlan]):
    name = "launch"
    spec_model = LaunchStep
    undo_last = True  # rollback restarts servers after the files are back (runner.rollback)
    not_tested = "skipped (a launch starts a server on a host: nothing of a release to test)"

    def facts(self, step: Step, spec: LaunchStep, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        facts = [("server it would start", " ".join(str(shown(a)) for a in spec.command))]
        if spec.health is not None:
            facts.append(("ready when", f"GET {shown(spec.health.url)} answers 200"))
        return facts

    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        measured = (done.details or {}).get("spec_decode")
        if not isinstance(measured, dict):
            return []
        return [("speculative decoding measured", "\n".join(f"{k}: {v}" for k, v in sorted(measured.items())
                                                              if not isinstance(v, (dict, list))))]

    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        return []  # a server changes no file (what it runs is what the other steps wrote)

    async def plan(self, ctx: HostContext, step: Step, spec: LaunchStep) -> Planned[LaunchPlan]:
        result, info, cmd = await plan_launch(ctx, step, spec)
        return Planned(result, (result, info, cmd))

    async def apply(self, ctx: HostContext, step: Step, spec: LaunchStep, planned: Planned[LaunchPlan]) -> StepResult:
        return await apply_launch(ctx, step, spec, planned.data)

    async def state(self, ctx: HostContext, step: Step, spec: LaunchStep, planned: Planned[LaunchPlan],
                    records: list[RunRecord]) -> StepResult:
        out = launch_state(planned.result)
        last = last_gate(records, step.name)
        if last is not None:
            run_id, figures = last
            out.message += f"; last gate (run {run_id}): {gate_summary(figures)}"
            out.details = {**(out.details or {}), "last_gate": {"run_id": run_id, **figures}}
        return out

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        # The journal keeps env names only: the values come from the recipe being rolled back.
        found = next((spec for s in ctx.loaded.recipe.steps if s.name == done.name and (spec := LaunchStep.of(s))),
                     None)
        env = dict(found.env) if found else {}
        health = found.health if found else None
        undone = await undo_launch(ctx.agent, ctx.journal.state_dir, done, ctx.force, ctx.loaded.redactor, env,
                                   ctx.run_id, health)
        return StepResult(name=done.name, kind=self.name, status="changed" if undone.ok else "failed",
                          message=undone.message)

    def changed(self, done: StepResult) -> bool:
        """A launch that started servers (even one whose gate then failed) has them to stop."""
        return done.status in ("changed", "failed") and bool((done.details or {}).get("servers"))
