"""EAGLE-3 drafter validation: the torch-free checkpoint reader, the eagle3 validator and
the fixture generator (fixtures/make_drafter.py)."""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixtures.make_drafter import (
    SHARD_NAMES,
    VARIANTS,
    drafter_config,
    drafter_tensors,
    make_drafter,
    safetensors_data_start,
    target_config,
    write_drafter,
)
from patchkit.host.checkpoint import VALIDATORS, read_checkpoint, reader_source, validate
from patchkit.host.checkpoint import reader as reader_module
from patchkit.host.checkpoint.eagle3 import validate_eagle3_drafter

REPO = Path(__file__).resolve().parents[2]
READER = REPO / "patchkit" / "host" / "checkpoint" / "reader.py"
SHARD1, SHARD2 = SHARD_NAMES


def problems_of(path: Path, target: dict | None = None) -> list[str]:
    view = read_checkpoint(path)
    json.dumps(view)  # always plain JSON
    return validate("eagle3-drafter", view, target)


def write_custom(dest: Path, mutate_config=None, mutate_tensors=None, sharded=False, **sizes):
    config = drafter_config(**sizes)
    tensors = drafter_tensors(config)
    if mutate_config:
        mutate_config(config)
    if mutate_tensors:
        mutate_tensors(tensors)
    return write_drafter(dest, config, tensors, sharded=sharded)


# ---- valid drafters ------------------------------------------------------------------


def test_valid_single_file_has_no_problems(tmp_path):
    path = make_drafter(tmp_path / "d")
    view = read_checkpoint(path)
    assert view["problems"] == []
    assert view["layout"] == "single"
    assert view["config"]["architectures"] == ["LlamaForCausalLMEagle3"]
    tensors = view["files"]["model.safetensors"]["tensors"]
    assert tensors["d2t"] == {"dtype": "I64", "shape": [256]}
    assert tensors["t2d"] == {"dtype": "BOOL", "shape": [1024]}
    assert tensors["fc.weight"] == {"dtype": "F32", "shape": [64, 192]}
    assert view["files"]["model.safetensors"]["size"] == (path / "model.safetensors").stat().st_size
    assert validate_eagle3_drafter(view) == []
    assert validate_eagle3_drafter(view, target_config()) == []


def test_valid_sharded_has_no_problems(tmp_path):
    path = make_drafter(tmp_path / "d", "valid-sharded")
    view = read_checkpoint(path)
    assert view["problems"] == []
    assert view["layout"] == "sharded"
    assert sorted(view["files"]) == sorted(SHARD_NAMES)
    assert view["index"]["weight_map"]["d2t"] == SHARD2
    assert validate_eagle3_drafter(view, target_config()) == []


@pytest.mark.parametrize("sizes", [
    {"hidden_size": 128, "target_hidden_size": 128, "num_attention_heads": 4,
     "num_key_value_heads": 4, "intermediate_size": 256},   # head size 32, servable on CPU
    {"target_hidden_size": 96},                            # target wider than the drafter
    {"draft_vocab_size": 1024},                            # full vocabulary
])
def test_other_sizes_are_valid(tmp_path, sizes):
    path = make_drafter(tmp_path / "d", **sizes)
    target = target_config(hidden_size=sizes.get("target_hidden_size", 64))
    assert problems_of(path, target) == []


def test_layers0_prefix_and_fused_projections_are_valid(tmp_path):
    def rename(tensors):
        for name in [n for n in tensors if n.startswith("midlayer.")]:
            tensors["layers.0." + name[len("midlayer."):]] = tensors.pop(name)
        q = tensors.pop("layers.0.self_attn.q_proj.weight")
        k = tensors.pop("layers.0.self_attn.k_proj.weight")
        v = tensors.pop("layers.0.self_attn.v_proj.weight")
        tensors["layers.0.self_attn.qkv_proj.weight"] = np.concatenate([q, k, v])
        tensors["embed_tokens.weight"] = np.zeros((1024, 64), dtype=np.float32)

    assert problems_of(write_custom(tmp_path / "d", mutate_tensors=rename)) == []


def test_defaults_for_optional_config_keys(tmp_path):
    """Without draft_vocab_size / target_hidden_size, vLLM uses vocab_size / hidden_size."""
    def drop(config):
        del config["draft_vocab_size"], config["target_hidden_size"]

    path = write_custom(tmp_path / "full", mutate_config=drop, draft_vocab_size=1024)
    assert problems_of(path) == []
    path = write_custom(tmp_path / "small", mutate_config=drop)  # d2t/lm_head still 256
    assert problems_of(path) == [
        "model.safetensors: d2t has shape [256], expected [1024] ([draft_vocab_size])",
        "model.safetensors: lm_head.weight has shape [256, 64], expected [1024, 64] "
        "([draft_vocab_size, hidden_size])",
    ]


def test_generator_is_deterministic(tmp_path):
    def digest(path):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in path.iterdir()}

    a = make_drafter(tmp_path / "a", "valid-sharded")
    b = make_drafter(tmp_path / "b", "valid-sharded")
    assert digest(a) == digest(b)
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in a.iterdir())


def test_generator_cli(tmp_path):
    dest = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, str(REPO / "fixtures" / "make_drafter.py"), str(dest),
         "--variant", "d2t-wrong-dtype", "--hidden-size", "128", "--target-hidden-size", "128",
         "--target-config", str(tmp_path / "target")],
        capture_output=True, text=True, check=True)
    assert "d2t-wrong-dtype drafter written" in result.stdout
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    assert target["hidden_size"] == 128
    assert problems_of(dest, target) == ["model.safetensors: d2t has dtype F32, expected I64"]


def test_generator_rejects_unknown_variant(tmp_path):
    with pytest.raises(ValueError, match="unknown variant 'nope'; known: valid, "):
        make_drafter(tmp_path / "d", "nope")


# ---- broken variants: each refused with its specific message ------------------------------

EXPECTED = {
    "missing-d2t": ["model.safetensors: d2t is missing, expected I64 [256] ([draft_vocab_size])"],
    "d2t-wrong-dtype": ["model.safetensors: d2t has dtype F32, expected I64"],
    "fc-wrong-shape": ["model.safetensors: fc.weight has shape [64, 128], expected [64, 192] "
                       "([hidden_size, 3*target_hidden_size])"],
    "wrong-architecture": ["config.json: architectures is ['LlamaForCausalLM'], "
                           "expected LlamaForCausalLMEagle3"],
    "missing-shard": [f"{SHARD2}: missing, but model.safetensors.index.json names it for 5 "
                      f"tensor(s): d2t, fc.weight, lm_head.weight, norm.weight, t2d"],
}


def test_every_variant_is_covered():
    assert set(VARIANTS) == set(EXPECTED) | {"valid", "valid-sharded", "truncated"}


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_broken_variant_is_refused_with_its_message(tmp_path, variant):
    path = make_drafter(tmp_path / "d", variant)
    assert problems_of(path, target_config()) == EXPECTED[variant]


def test_truncated_file_is_refused(tmp_path):
    path = make_drafter(tmp_path / "d", "truncated")
    full = make_drafter(tmp_path / "full") / "model.safetensors"
    size = (path / "model.safetensors").stat().st_size
    assert safetensors_data_start(full) < size < full.stat().st_size
    problems = problems_of(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"model.safetensors: truncated: file is {size} bytes, but "
                                  f"the data of tensor ")
    assert f"ends at byte {full.stat().st_size} (" in problems[0]


def test_many_problems_are_listed_at_once(tmp_path):
    def config(c):
        c["architectures"] = ["LlamaForCausalLM"]
        c["num_hidden_layers"] = 2

    def tensors(t):
        del t["d2t"]
        t["t2d"] = t["t2d"].astype(np.uint8)
        t["fc.weight"] = np.zeros((64, 64), dtype=np.float32)
        t["midlayer.self_attn.k_proj.weight"] = np.zeros((32, 64), dtype=np.float32)
        del t["midlayer.hidden_norm.weight"]
        t["norm.weight"] = np.ones(64, dtype=np.int32)

    path = write_custom(tmp_path / "d", mutate_config=config, mutate_tensors=tensors)
    assert problems_of(path) == [
        "config.json: architectures is ['LlamaForCausalLM'], expected LlamaForCausalLMEagle3",
        "config.json: num_hidden_layers is 2, expected 1 (an EAGLE-3 drafter has one decoder "
        "layer)",
        "model.safetensors: d2t is missing, expected I64 [256] ([draft_vocab_size])",
        "model.safetensors: t2d has dtype U8, expected BOOL",
        "model.safetensors: fc.weight has shape [64, 64], expected [64, 192] "
        "([hidden_size, 3*target_hidden_size])",
        "model.safetensors: norm.weight has dtype I32, expected a floating-point dtype "
        "(F32, F16 or BF16)",
        "model.safetensors: midlayer.self_attn.k_proj.weight has shape [32, 64], expected "
        "[32, 128] ([num_key_value_heads*head_dim, 2*hidden_size])",
        "model.safetensors: midlayer.hidden_norm.weight is missing, expected shape [64] "
        "([hidden_size])",
    ]


def test_config_problems(tmp_path):
    def config(c):
        del c["hidden_size"]
        c["vocab_size"] = "1024"
        c["draft_vocab_size"] = 4096
        c["num_attention_heads"] = 3
        c["eagle_aux_hidden_state_layer_ids"] = [0, -1]

    problems = problems_of(write_custom(tmp_path / "d", mutate_config=config))
    assert "config.json: hidden_size is missing" in problems
    assert "config.json: vocab_size is '1024', expected a positive integer" in problems
    assert ("config.json: num_attention_heads 3 is not a multiple of num_key_value_heads 2"
            in problems)
    assert "config.json: eagle_aux_hidden_state_layer_ids [0, -1] has negative layer ids" in problems
    assert ("config.json: eagle_aux_hidden_state_layer_ids has 2 entries, expected 3 "
            "(fc.weight takes 3 target hidden states)") in problems
    # hidden_size unknown: shape checks still compare the dimensions that are known
    assert ("model.safetensors: lm_head.weight has shape [256, 64], expected [4096, ?] "
            "([draft_vocab_size, hidden_size])") in problems


def test_layer_prefix_problems(tmp_path):
    def no_layer(t):
        for name in [n for n in t if n.startswith("midlayer.")]:
            del t[name]

    assert problems_of(write_custom(tmp_path / "a", mutate_tensors=no_layer)) == [
        "model.safetensors: no decoder layer weights, expected midlayer.* (or layers.0.*) tensors"]

    def both(t):
        t["layers.0.hidden_norm.weight"] = t["midlayer.hidden_norm.weight"]
        t["layers.1.hidden_norm.weight"] = t["midlayer.hidden_norm.weight"]

    assert problems_of(write_custom(tmp_path / "b", mutate_tensors=both)) == [
        "model.safetensors: has tensors of layer(s) 1 (layers.N.*), but an EAGLE-3 drafter "
        "has one decoder layer",
        "model.safetensors: both midlayer.* and layers.0.* tensors are present; vLLM renames "
        "midlayer.* to layers.0.*, keep only one set",
    ]


def test_sharded_index_problems(tmp_path):
    path = make_drafter(tmp_path / "d", "valid-sharded")
    index_path = path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["extra.weight"] = SHARD1
    index["weight_map"]["fc.weight"] = "../../elsewhere.safetensors"
    index_path.write_text(json.dumps(index))
    assert problems_of(path) == [
        "model.safetensors.index.json: weight_map names files that are not plain file names "
        "in the checkpoint folder: ../../elsewhere.safetensors",
        f"{SHARD1}: 1 tensor(s) that model.safetensors.index.json places in this file are not "
        f"in its header: extra.weight",
    ]
    # a tensor the index does not name is still found in its shard (vLLM loads whole files)
    index_path.write_text("{not json")
    problems = problems_of(path)
    assert len(problems) == 1 and problems[0].startswith(
        "model.safetensors.index.json: not valid JSON (")


# ---- target checks -------------------------------------------------------------------------


def test_target_hidden_size_mismatch(tmp_path):
    path = make_drafter(tmp_path / "d")
    assert problems_of(path, target_config(hidden_size=128)) == [
        "config.json: target_hidden_size is 64, but the target's hidden_size is 128"]

    no_key = write_custom(tmp_path / "n", mutate_config=lambda c: c.pop("target_hidden_size"))
    assert problems_of(no_key, target_config(hidden_size=128)) == [
        "config.json: target_hidden_size is not set, so it defaults to hidden_size 64, but the "
        "target's hidden_size is 128; set target_hidden_size to 128"]


def test_target_vocab_mismatch(tmp_path):
    path = make_drafter(tmp_path / "d")
    assert problems_of(path, target_config(vocab_size=2048)) == [
        "config.json: vocab_size is 1024, but the target's vocab_size is 2048"]


def test_aux_layer_ids_against_target(tmp_path):
    path = make_drafter(tmp_path / "d", aux_layer_ids=[1, 2, 5])
    assert problems_of(path, target_config(num_hidden_layers=4)) == [
        "config.json: eagle_aux_hidden_state_layer_ids [1, 2, 5]: 5 is beyond the target's 4 "
        "layers (valid ids are 0..4)"]
    assert problems_of(path, target_config(num_hidden_layers=5)) == []
    # vLLM >= 0.18 counts 0 = embeddings .. L = last layer's output: [0, 1, 2] fits 2 layers
    path = make_drafter(tmp_path / "e", aux_layer_ids=[0, 1, 2])
    assert problems_of(path, target_config(num_hidden_layers=2)) == []
    assert problems_of(path, target_config(num_hidden_layers=1)) == [
        "config.json: eagle_aux_hidden_state_layer_ids [0, 1, 2]: 2 is beyond the target's 1 "
        "layers (valid ids are 0..1)"]


def test_nested_aux_layer_ids(tmp_path):
    def nest(c):
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": c.pop(
            "eagle_aux_hidden_state_layer_ids")}

    path = write_custom(tmp_path / "d", mutate_config=nest, aux_layer_ids=[0, 1, 9])
    assert problems_of(path, target_config(num_hidden_layers=2)) == [
        "config.json: eagle_aux_hidden_state_layer_ids [0, 1, 9]: 9 is beyond the target's 2 "
        "layers (valid ids are 0..2)"]

    def both(c):
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [0, 1, 3]}

    path = write_custom(tmp_path / "e", mutate_config=both)
    assert problems_of(path) == [
        "config.json: eagle_aux_hidden_state_layer_ids [0, 1, 2] differs from "
        "eagle_config.eagle_aux_hidden_state_layer_ids [0, 1, 3]"]


def test_missing_aux_layer_ids_with_a_tiny_target(tmp_path):
    path = make_drafter(tmp_path / "d", aux_layer_ids=None)
    assert problems_of(path) == []
    assert problems_of(path, target_config(num_hidden_layers=32)) == []
    assert problems_of(path, target_config(num_hidden_layers=2)) == [
        "config.json: eagle_aux_hidden_state_layer_ids is not set, and vLLM's Llama default "
        "(2, L//2, L-3) = [2, 1, -1] does not fit the target's 2 layers; set it explicitly "
        "(valid ids are 0..2)"]


def test_all_target_mismatches_at_once_and_text_config(tmp_path):
    path = make_drafter(tmp_path / "d", aux_layer_ids=[0, 1, 3])
    target = {"architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 2}}
    assert problems_of(path, target) == [
        "config.json: target_hidden_size is 64, but the target's hidden_size is 7168",
        "config.json: vocab_size is 1024, but the target's vocab_size is 163840",
        "config.json: eagle_aux_hidden_state_layer_ids [0, 1, 3]: 3 is beyond the target's 2 "
        "layers (valid ids are 0..2)",
    ]
    assert problems_of(path, {"hidden_size": "big"}) == [
        "target: hidden_size is 'big', expected a positive integer"]
    assert problems_of(path, {"hidden_size": 64}) == []  # values not given are not checked


# ---- registry ------------------------------------------------------------------------------


def test_registry():
    assert VALIDATORS["eagle3-drafter"] is validate_eagle3_drafter
    with pytest.raises(KeyError, match="unknown checkpoint validator 'medusa'; known: "
                                       "eagle3-drafter"):
        validate("medusa", {})


# ---- the reader never raises on garbage ------------------------------------------------------


def write_weights(folder: Path, data: bytes, name: str = "model.safetensors") -> Path:
    make_drafter(folder)
    (folder / name).write_bytes(data)
    return folder


def header_bytes(header, declared_len=None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(raw) if declared_len is None else declared_len
    return struct.pack("<Q", length) + raw


def only_problem(path: Path) -> str:
    view = read_checkpoint(path)
    json.dumps(view)
    assert len(view["problems"]) == 1, view["problems"]
    # no noise: the validator adds nothing about tensors it could not see
    assert validate_eagle3_drafter(view) == view["problems"]
    return view["problems"][0]


def test_reader_on_empty_and_tiny_files(tmp_path):
    assert only_problem(write_weights(tmp_path / "a", b"")) == (
        "model.safetensors: truncated or not a safetensors file: empty (0 bytes), shorter than "
        "the 8-byte header length")
    assert only_problem(write_weights(tmp_path / "b", b"\x01\x02\x03")).startswith(
        "model.safetensors: truncated or not a safetensors file: only 3 bytes")


def test_reader_on_huge_declared_header_length(tmp_path):
    path = write_weights(tmp_path / "a", header_bytes(b"{}", declared_len=2**64 - 1))
    assert only_problem(path) == (
        "model.safetensors: truncated or not a safetensors file: header length "
        f"{2**64 - 1} bytes is beyond the end of the file (10 bytes)")


def test_reader_caps_the_header_it_reads(tmp_path, monkeypatch):
    # A (sparse) file really as large as its declared header: refused without reading it.
    path = tmp_path / "a"
    make_drafter(path)
    declared = reader_module.MAX_HEADER_BYTES + 1
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", declared))
        f.truncate(8 + declared + 10)
    read_sizes = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            read_sizes.append(n)
            return self.f.read(n)

    monkeypatch.setattr(reader_module, "open",
                        lambda p, mode="r", *a, **k: Spy(real_open(p, mode, *a, **k)),
                        raising=False)
    assert only_problem(path) == (
        f"model.safetensors: header length {declared} bytes exceeds the 100 MB limit; corrupt "
        f"or not a safetensors file")
    assert max(n for n in read_sizes if n != -1) <= reader_module.MAX_JSON_BYTES + 1
    assert -1 not in read_sizes


@pytest.mark.parametrize("header, message", [
    (b"\xff\xfe not json", "model.safetensors: header is not valid JSON; corrupt or not a "
                           "safetensors file ("),
    (b"[1, 2]", "model.safetensors: header is a JSON list, expected an object"),
    (b"[" * 100000 + b"]" * 100000, "model.safetensors: header is not valid JSON"),
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0]}},
     "model.safetensors: malformed header entry (needs dtype, shape and data_offsets) for 1 "
     "tensor(s): x"),
    ({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
     "model.safetensors: malformed header entry"),
    ({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
     "model.safetensors: data length does not match dtype and shape for 1 tensor(s): x"),
])
def test_reader_on_bad_headers(tmp_path, header, message):
    data = header_bytes(header) + b"\0" * 8
    view = read_checkpoint(write_weights(tmp_path / "a", data))
    json.dumps(view)
    assert any(p.startswith(message) for p in view["problems"]), view["problems"]
    validate_eagle3_drafter(view)


def test_reader_on_bad_folders_and_json(tmp_path):
    assert only_problem(tmp_path / "nope") == f"{tmp_path / 'nope'}: checkpoint folder does not exist"
    (tmp_path / "file").write_text("x")
    assert only_problem(tmp_path / "file").startswith(f"{tmp_path / 'file'}: not a folder")

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "pytorch_model.bin").write_bytes(b"\0")
    assert read_checkpoint(empty)["problems"] == [
        "config.json: missing",
        "model.safetensors: missing (no *.safetensors file and no model.safetensors.index.json); "
        "found pytorch_model.bin, which cannot be checked without torch: convert it to "
        "safetensors",
    ]
    assert validate_eagle3_drafter(read_checkpoint(empty)) == read_checkpoint(empty)["problems"]

    path = make_drafter(tmp_path / "d")
    (path / "config.json").write_bytes(b"\x80garbage")
    view = read_checkpoint(path)
    assert view["config"] is None
    assert view["problems"][0].startswith("config.json: not valid UTF-8 (")
    # without a config only dtypes and presence can be checked: no spurious lines
    assert validate_eagle3_drafter(view) == view["problems"]
    (path / "config.json").write_text("[1]")
    assert read_checkpoint(path)["problems"] == [
        "config.json: top level is a JSON list, expected an object"]


def test_reader_never_raises_on_random_garbage(tmp_path):
    rng = random.Random(1234)
    valid = make_drafter(tmp_path / "valid") / "model.safetensors"
    good = valid.read_bytes()
    start = safetensors_data_start(valid)
    folder = make_drafter(tmp_path / "g")
    target = folder / "model.safetensors"
    for i in range(300):
        kind = i % 3
        if kind == 0:  # random bytes of random length
            data = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 8, 9, 64, 999])))
        elif kind == 1:  # a valid file with a few header bytes flipped
            data = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(start)] = rng.getrandbits(8)
            data = bytes(data)
        else:  # a valid file cut anywhere
            data = good[: rng.randrange(len(good))]
        target.write_bytes(data)
        view = read_checkpoint(folder)
        json.dumps(view)
        assert all(isinstance(p, str) for p in view["problems"])
        validate_eagle3_drafter(view, target_config())


# ---- the reader is shippable: stdlib only, Python 3.8 ------------------------------------------


def test_reader_source_is_python38_stdlib_only():
    src = reader_source()
    assert src == READER.read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module != "__future__", ast.dump(node)
            imported.add(node.module.split(".")[0])
        # annotations are evaluated at runtime on 3.8 (no __future__ import allowed here)
        assert not isinstance(node, (ast.AnnAssign,)), "no annotations in reader.py"
        if isinstance(node, ast.FunctionDef):
            assert node.returns is None and all(a.annotation is None for a in node.args.args)
    assert imported <= set(sys.stdlib_module_names), imported


def python38() -> str | None:
    candidates = [shutil.which("python3.8")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == "(3, 8)":
            return exe
    return None


def test_reader_runs_on_real_python38(tmp_path):
    exe = python38()
    if exe is None:
        pytest.skip("no Python 3.8 interpreter here")
    good = make_drafter(tmp_path / "good", "valid-sharded")
    bad = make_drafter(tmp_path / "bad", "truncated")
    # shipped as source: run the file alone, outside the patchkit package
    shipped = tmp_path / "shipped_reader.py"
    shipped.write_text(reader_source())
    for path in (good, bad, tmp_path / "missing"):
        out = subprocess.run([exe, "-I", str(shipped), str(path)], capture_output=True,
                             text=True, timeout=60, check=True)
        assert json.loads(out.stdout) == json.loads(json.dumps(read_checkpoint(path)))
