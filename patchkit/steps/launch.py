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

import asyncio
import hashlib
import json
import posixpath
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from patchkit.agent import AgentClient
from patchkit.agent.protocol import (
    HTTP, HTTP_BATCH, LAUNCH_INSPECT, LAUNCH_START, LAUNCH_STOP, LOG_TAIL,
    HttpRequest, LaunchInspectReply, LaunchStopReply,
)
from patchkit.errors import HostError
from patchkit.recipe import Health, LaunchStep, SpecDecodeGate, Step
from patchkit.redact import Redactor
from patchkit.results import LaunchDetails, LaunchServer, RunRecord, StepResult
from patchkit.steps.context import HostContext
from patchkit.steps.kind import Planned, StepKind, Undone

DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"


class GateFailed(Exception):
    """A launch gate said no; the message says why, with numbers."""


def resolved_argv(command: list[str], ctx: HostContext) -> list[str]:
    if command[0] in ("python", "python3"):
        return [ctx.agent.info.get("python", command[0]), *command[1:]]
    return list(command)


# pbkdf2 rounds for the part of a command hash that covers env values and secret arguments:
# the hash sits in journals and JSON reports, and a short password must not be guessable
# from it. About 20 ms, once per launch step per host, off the event loop.
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


def base_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every sample per metric name (labels folded), e.g. over engines."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, rest = line.partition(" ")
        name = name_part.split("{", 1)[0]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


def acceptance(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    drafted = after.get(DRAFT_TOKENS, 0.0) - before.get(DRAFT_TOKENS, 0.0)
    accepted = after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)
    drafts = after.get(DRAFTS, 0.0) - before.get(DRAFTS, 0.0)
    return {
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "drafts": drafts,
        "acceptance_rate": accepted / drafted if drafted > 0 else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts > 0 else None,
    }


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
    reply = await agent.call(HTTP({"method": "GET", "url": base_url(url) + "/v1/models"}), reply_wait=60)
    if reply.get("status") != 200:
        raise GateFailed(f"/v1/models answered {reply.get('status') or reply.get('error')}")
    return [m.get("id") for m in json.loads(reply["body"]).get("data", [])]


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


async def measure(agent: AgentClient, url: str, gate: SpecDecodeGate, redactor: Redactor) -> dict[str, Any]:
    """Run the gate's prompts; acceptance from the counters, tokens/s timed on the host."""
    root = base_url(url)
    model = gate.model or (await _models(agent, url))[0]
    metrics_before = await agent.call(HTTP({"method": "GET", "url": root + "/metrics"}), reply_wait=60)
    requests: list[HttpRequest] = [
        {"method": "POST", "url": root + "/v1/completions",
         "body": {"model": model, "prompt": p, "max_tokens": gate.max_tokens, "temperature": gate.temperature}}
        for p in gate.prompts]
    batch = await agent.call(HTTP_BATCH({"requests": requests}), reply_wait=3600)
    metrics_after = await agent.call(HTTP({"method": "GET", "url": root + "/metrics"}), reply_wait=60)
    failed = [r for r in batch["results"] if r.get("status") != 200]
    if failed:
        first = failed[0]
        raise GateFailed(f"{len(failed)} of {len(requests)} completions failed: "
                         f"{first.get('status') or first.get('error')} {_clip(redactor, first.get('body'))}")
    tokens = sum(json.loads(r["body"]).get("usage", {}).get("completion_tokens", 0) for r in batch["results"])
    out: dict[str, Any] = {"completion_tokens": tokens, "seconds": round(batch["seconds"], 3),
                           "tokens_per_s": round(tokens / batch["seconds"], 2) if batch["seconds"] else None}
    if metrics_before.get("status") == 200 and metrics_after.get("status") == 200:
        out.update(acceptance(parse_prometheus(metrics_before["body"]), parse_prometheus(metrics_after["body"])))
    return out


def _log_path(ctx: HostContext, step_name: str, spec_log: str | None) -> str:
    return spec_log or posixpath.join(ctx.journal.state_dir, "launch", f"{step_name}.log")


async def _start(agent: AgentClient, state_dir: str, name: str, cmd: ServerCommand, command_hash: str,
                 log: str) -> LaunchServer:
    started = await agent.call(LAUNCH_START({
        "state_dir": state_dir, "name": name, "argv": cmd.argv, "env": cmd.env, "cwd": cmd.cwd, "log_path": log,
        "command_hash": command_hash, "shown_argv": cmd.shown_argv, "salt": cmd.salt}))
    return LaunchServer.model_validate(started)


async def _stop(ctx: HostContext, name: str, timeout_s: float) -> LaunchStopReply:
    return await ctx.agent.call(LAUNCH_STOP({"state_dir": ctx.journal.state_dir, "name": name, "timeout_s": timeout_s}),
                                reply_wait=timeout_s + 60)


# What a launch's plan hands its apply: the result, what the host said of the server, its command.
LaunchPlan = tuple[StepResult, LaunchInspectReply, ServerCommand]


async def plan_launch(ctx: HostContext, step: Step, spec: LaunchStep) -> LaunchPlan:
    result = StepResult(name=step.name, kind="launch", status="changed", file=spec.health.url)
    info = await _inspect(ctx.agent, ctx.journal.state_dir, step.name, spec.health)
    record = info.get("record") or {}
    cmd = server_command(ctx, spec.command, spec.env, spec.cwd, record.get("salt"))
    wanted = await cmd.command_hash()
    healthy = _healthy(info)
    if info["running"] and record.get("command_hash") == wanted and healthy:
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
    return result, info, cmd


async def apply_launch(ctx: HostContext, step: Step, spec: LaunchStep, planned: LaunchPlan) -> StepResult:
    result, info, cmd = planned
    result = result.model_copy(deep=True)
    if result.status == "ok" or ctx.dry_run:
        if ctx.dry_run and result.status == "changed":
            result.message = "would start: " + result.message
        return result
    record = info.get("record") or {}
    wanted = (result.details or {})["command_hash"]
    replaced = None
    if info["running"]:
        if record.get("command_hash") != wanted and ctx.no_restart:
            result.status = "failed"
            result.message = (f"a different command runs as {step.name} (pid {record['pid']}); "
                              "--no-restart refuses to replace it")
            return result
        stopped = await _stop(ctx, step.name, spec.stop_timeout_s)
        replaced = public_record(stopped.get("record"))
    log = _log_path(ctx, step.name, spec.log)
    started = await _start(ctx.agent, ctx.journal.state_dir, step.name, cmd, wanted, log)
    details = LaunchDetails(servers=[started], replaced=LaunchServer.model_validate(replaced) if replaced else None,
                            log=log)
    try:
        details.startup_s = round(await wait_healthy(ctx.agent, ctx.journal.state_dir, step.name, spec.health), 1)
        notes = [f"healthy after {details.startup_s}s (pid {started.pid})"]
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


async def _spec_gate(ctx: HostContext, step: Step, spec: LaunchStep, details: LaunchDetails) -> str:
    gate = spec.spec_decode
    assert gate is not None
    measured = await measure(ctx.agent, spec.health.url, gate, ctx.loaded.redactor)
    details.spec_decode = measured
    rate, mal = measured.get("acceptance_rate"), measured.get("mean_acceptance_length")
    if rate is None:
        raise GateFailed("no draft tokens were proposed: is speculative decoding on? "
                         f"({DRAFT_TOKENS} did not move)")
    note = f"acceptance {rate:.1%}, mean acceptance length {mal:.2f}, {measured['tokens_per_s']} tok/s"
    problems = []
    if gate.min_acceptance_rate is not None and rate < gate.min_acceptance_rate:
        problems.append(f"acceptance rate {rate:.2%} is below {gate.min_acceptance_rate:.0%}")
    if gate.min_mean_acceptance_length is not None and mal is not None and mal < gate.min_mean_acceptance_length:
        problems.append(f"mean acceptance length {mal:.2f} is below {gate.min_mean_acceptance_length}")
    if problems:
        raise GateFailed("; ".join(problems) + f" ({int(measured['accepted_tokens'])} of "
                         f"{int(measured['draft_tokens'])} drafted tokens accepted over {len(gate.prompts)} prompts)")
    if spec.baseline:
        note += "; " + await _baseline(ctx, step, spec, details)
    return note


async def _baseline(ctx: HostContext, step: Step, spec: LaunchStep, details: LaunchDetails) -> str:
    base = spec.baseline
    assert base is not None and spec.spec_decode is not None and details.spec_decode is not None
    name = f"{step.name}-baseline"
    log = _log_path(ctx, name, None)
    cmd = server_command(ctx, base.command, spec.env, spec.cwd)
    started = await _start(ctx.agent, ctx.journal.state_dir, name, cmd, await cmd.command_hash(), log)
    details.servers.append(started)
    await wait_healthy(ctx.agent, ctx.journal.state_dir, name, base.health)
    plain = await measure(ctx.agent, base.health.url, spec.spec_decode, ctx.loaded.redactor)
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
                      redactor: Redactor, env: dict[str, str]) -> Undone:
    """Stop the servers a run started (if they are still the ones it started); restart what it replaced.

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
        restarted = await _restart(agent, state_dir, previous, redactor, env)
        ok = restarted.ok
        notes.append(restarted.message)
    return Undone(ok, "; ".join(notes) or "nothing to stop")


async def _restart(agent: AgentClient, state_dir: str, previous: LaunchServer, redactor: Redactor,
                   env: dict[str, str]) -> Undone:
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
    again = await _start(agent, state_dir, previous.name, cmd, previous.command_hash, previous.log)
    return Undone(True, f"restarted the server it replaced (pid {again.pid})")


def launch_state(planned: StepResult) -> StepResult:
    """running and healthy -> applied; the same command running, unhealthy -> drifted; another
    command running or none -> pending."""
    out = planned.model_copy(deep=True)
    details = planned.details or {}
    if planned.status == "ok":
        out.status, out.message = "applied", f"running, healthy (pid {details.get('pid')})"
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

    async def plan(self, ctx: HostContext, step: Step, spec: LaunchStep) -> Planned[LaunchPlan]:
        result, info, cmd = await plan_launch(ctx, step, spec)
        return Planned(result, (result, info, cmd))

    async def apply(self, ctx: HostContext, step: Step, spec: LaunchStep, planned: Planned[LaunchPlan]) -> StepResult:
        return await apply_launch(ctx, step, spec, planned.data)

    async def state(self, ctx: HostContext, step: Step, spec: LaunchStep, planned: Planned[LaunchPlan],
                    records: list[RunRecord]) -> StepResult:
        return launch_state(planned.result)

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        # The journal keeps env names only: the values come from the recipe being rolled back.
        found = next((s for s in ctx.loaded.recipe.steps if s.name == done.name and s.launch), None)
        env = dict(found.launch.env) if found and found.launch else {}
        undone = await undo_launch(ctx.agent, ctx.journal.state_dir, done, ctx.force, ctx.loaded.redactor, env)
        return StepResult(name=done.name, kind=self.name, status="changed" if undone.ok else "failed",
                          message=undone.message)

    def changed(self, done: StepResult) -> bool:
        """A launch that started servers (even one whose gate then failed) has them to stop."""
        return done.status in ("changed", "failed") and bool((done.details or {}).get("servers"))
