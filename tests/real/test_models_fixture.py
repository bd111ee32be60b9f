"""The tiny-model fixtures (fixtures/make_models.py) build, are deterministic and load.

Loading happens with transformers in the cached base venv (a subprocess on its python);
no server is started here. Serving them was proven by hand (see make_models' docstring);
the launch-step tests start the real servers.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import make_models as mm
from fixtures.vllm_envs import base_env, cache_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "fixtures" / "make_models.py"


def base_python(code: str, timeout: float = 600) -> str:
    """Run ``code`` with the base venv's python (repo importable); return its stdout."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(base_env()), "-c", code], cwd=REPO, env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def checked(kind: str, path: Path) -> dict:
    code = ("import json; from fixtures.make_models import check; "
            f"print(json.dumps(check({kind!r}, {str(path)!r})))")
    return json.loads(base_python(code).strip().splitlines()[-1])


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


# --- no base env needed -------------------------------------------------------------------


def test_serve_command_has_the_flags_that_work(tmp_path: Path) -> None:
    argv = mm.serve_command("/py", tmp_path / "t", 8123, tmp_path / "d")
    assert argv[:5] == ["/py", "-m", "vllm.entrypoints.cli.main", "serve", str(tmp_path / "t")]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    for flag, value in (("--dtype", "float32"), ("--max-model-len", "512"),
                        ("--max-num-seqs", "4"), ("--kv-cache-memory-bytes", "128M")):
        assert argv[argv.index(flag) + 1] == value
    assert "--enforce-eager" in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": str(tmp_path / "d"),
                    "num_speculative_tokens": 3}
    assert "--speculative-config" not in mm.serve_command("/py", "t", 1)


def test_serve_env_puts_the_overlay_first(tmp_path: Path) -> None:
    env = mm.serve_env({"PYTHONPATH": "/a:/b", "HOME": "/h"})
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert parts == [str(mm.vllm_dist_overlay()), "/a", "/b"]
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["HOME"] == "/h"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert mm.serve_env({}, kv_cache_gib=1)["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_overlay_declares_a_cpu_build_of_vllm() -> None:
    overlay = mm.vllm_dist_overlay()
    assert overlay.is_relative_to(cache_dir())
    (dist_info,) = overlay.iterdir()
    assert dist_info.name == "vllm-0.32.0+cpu.dist-info"
    metadata = (dist_info / "METADATA").read_text()
    assert "Name: vllm\n" in metadata and "Version: 0.32.0+cpu\n" in metadata


def test_cache_dirs_are_keyed_by_kind_and_code() -> None:
    names = {kind: mm.cached_model_dir(kind) for kind in mm.KINDS}
    assert len(set(names.values())) == len(mm.KINDS)
    for kind, path in names.items():
        assert path.parent == cache_dir() / "models"
        prefix, _, key = path.name.partition("-")
        assert prefix == kind and len(key) == 16
    assert mm.cached_model_dir("llama") == names["llama"]  # stable
    with pytest.raises(ValueError, match="unknown kind"):
        mm.cached_model_dir("mistral")


def test_rigged_theory() -> None:
    assert mm.RIGGED_EXPECTED[0.0] == 1.0
    assert mm.RIGGED_EXPECTED[1.0] == pytest.approx(0.2917, abs=1e-4)


# --- the base env: build, determinism, transformers --------------------------------------


@pytest.mark.realenv
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["llama", "drafter"])
def test_build_is_deterministic_and_matches_the_cache(kind: str, tmp_path: Path) -> None:
    cached = mm.model_path(kind)
    assert cached.is_dir() and mm.model_path(kind) == cached  # built once, then reused
    out = tmp_path / kind
    proc = subprocess.run([str(base_env()), str(SCRIPT), str(out), "--kind", kind], check=False,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert tree_hashes(out) == tree_hashes(cached)


@pytest.mark.realenv
@pytest.mark.timeout(900)
def test_script_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--kind", "llama"],
                          check=False,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert (tmp_path / "x").read_text() == "keep"


@pytest.mark.realenv
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind,architecture,model_type", [
    ("llama", "LlamaForCausalLM", "llama"),
    ("gemma2", "Gemma2ForCausalLM", "gemma2"),
])
def test_target_loads_with_transformers(kind: str, architecture: str, model_type: str) -> None:
    path = mm.model_path(kind)
    for name in ("config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json"):
        assert (path / name).is_file(), name
    facts = checked(kind, path)
    assert facts["architecture"] == architecture and facts["model_type"] == model_type
    assert facts["vocab_size"] == facts["tokenizer_len"] == 1024
    assert facts["head_dim"] >= 32  # vLLM's CPU attention refuses smaller
    assert facts["bos_first"] and facts["roundtrip"] and facts["finite"]
    assert facts["special_ids"] == [0, 1, 2, 3]
    assert facts["logits_shape"][-1] == 1024 and facts["generated_new"] == 5
    config = json.loads((path / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 128
    assert config["num_attention_heads"] == 4
    assert (path / "model.safetensors").stat().st_size < 4_000_000


@pytest.mark.realenv
@pytest.mark.timeout(900)
def test_drafter_fits_the_target() -> None:
    target = json.loads((mm.model_path("llama") / "config.json").read_text())
    drafter_dir = mm.model_path("drafter")
    config = json.loads((drafter_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["vocab_size"] == target["vocab_size"]
    assert config["target_hidden_size"] == target["hidden_size"] == config["hidden_size"]
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    header = safetensors_header(drafter_dir / "model.safetensors")
    assert header["fc.weight"]["shape"] == [128, 3 * 128]
    assert header["lm_head.weight"]["shape"] == [256, 128]
    assert header["d2t"]["dtype"] == "I64" and header["d2t"]["shape"] == [256]
    assert header["t2d"]["dtype"] == "BOOL" and header["t2d"]["shape"] == [1024]
    assert header["midlayer.self_attn.q_proj.weight"]["shape"] == [128, 256]


@pytest.mark.realenv
@pytest.mark.timeout(900)
def test_rigged_target_puts_one_half_on_c_at_every_position() -> None:
    pair = mm.model_path("rigged")
    info = mm.rigged_info(pair)
    assert info["token"] == "Ġthe" and info["text"] == " the"
    assert info["expected_acceptance_rate"]["1.0"] == pytest.approx(0.2917, abs=1e-4)
    code = ("import json; from fixtures.make_models import check_rigged; "
            f"print(json.dumps([check_rigged({str(pair)!r}, seed=s, batch=3, length=n) "
            "for s, n in ((0, 48), (1, 7), (2, 200))]))")
    for facts in json.loads(base_python(code).strip().splitlines()[-1]):
        assert facts["token_id"] == info["token_id"]
        assert facts["p_c_min"] == pytest.approx(0.5, abs=1e-4)
        assert facts["p_c_max"] == pytest.approx(0.5, abs=1e-4)
        assert facts["argmax_is_c"]  # temperature 0: the target always picks C
        assert facts["max_other_prob"] < 1e-3  # the other half is spread over 1023 tokens
        assert facts["drafter_norm_zero"]  # all draft logits equal
        assert facts["draft0_target"] == info["token_id"]  # d2t[0]: draft id 0 -> C
        assert facts["draft0_is_smallest_target"]  # argmax's first maximum is C
        assert facts["t2d_matches"]
    target_facts = checked("llama", pair / "target")
    assert target_facts["architecture"] == "LlamaForCausalLM" and target_facts["roundtrip"]


@pytest.mark.realenv
@pytest.mark.timeout(900)
def test_overlay_makes_vllm_pick_the_cpu_platform() -> None:
    code = (
        "import importlib.metadata as md, json\n"
        "from vllm.platforms import vllm_version_matches_substr\n"
        "print(json.dumps([md.version('vllm'), vllm_version_matches_substr('cpu')]))\n"
    )
    env = mm.serve_env()
    proc = subprocess.run([str(base_env()), "-c", code], env=env, check=False, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["0.32.0+cpu", True]
    # Without the overlay there is no `vllm` distribution (why `vllm serve` needs it).
    bare = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    bare.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(base_env()), "-c", "import importlib.metadata as md; md.version('vllm')"],
        env=bare, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "PackageNotFoundError" in proc.stderr


def test_serve_env_fewer_processes() -> None:
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in mm.serve_env({})
    assert mm.serve_env({}, fewer_processes=True)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
