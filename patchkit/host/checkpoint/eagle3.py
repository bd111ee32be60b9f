"""Validate an EAGLE-3 drafter checkpoint from its reader view (see ``reader.py``).

Checks what vLLM needs to load the drafter (see FACTS.md, "EAGLE-3 drafter checkpoints",
and vLLM's ``model_executor/models/llama_eagle3.py``), from ``config.json`` and the
safetensors headers only, so no tensor data is read:

- architecture ``LlamaForCausalLMEagle3`` (vLLM's registry also knows the alias
  ``Eagle3LlamaForCausalLM``), one decoder layer;
- required tensors and their dtypes and shapes, derived from the config:
  ``d2t`` I64 [draft_vocab_size], ``t2d`` BOOL [vocab_size], ``fc.weight``
  [hidden, 3*target_hidden], ``lm_head.weight`` [draft_vocab_size, hidden],
  ``norm.weight`` [hidden], and the decoder layer (``midlayer.*``, which vLLM renames to
  ``layers.0.*``, or ``layers.0.*``) whose q/k/v projections take 2*hidden inputs;
  optional ``embed_tokens.weight`` [vocab_size, hidden] (vLLM shares the target's
  embedding when it is absent);
- optionally against the target's config: hidden size, vocab size, and the aux layer ids.

Every problem is one line, prefixed by the file it concerns; all are returned at once.
"""

from __future__ import annotations

from typing import Any, TypeGuard

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
EXPECTED_ARCHITECTURE = "LlamaForCausalLMEagle3"
ACCEPTED_ARCHITECTURES = (EXPECTED_ARCHITECTURE, "Eagle3LlamaForCausalLM")
AUX_KEY = "eagle_aux_hidden_state_layer_ids"
# fc.weight concatenates this many target hidden states (vLLM <= 0.17 hard-codes 3).
NUM_AUX_HIDDEN_STATES = 3
LAYER_PREFIXES = ("midlayer.", "layers.0.")
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2")

Shape = list[int | None]  # None: unknown, e.g. the config value is missing


def _fmt_shape(shape: Shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _mul(*values: int | None) -> int | None:
    result = 1
    for v in values:
        if v is None:
            return None
        result *= v
    return result


def _add(*values: int | None) -> int | None:
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class _Validation:
    def __init__(self, view: dict[str, Any], target: dict[str, Any] | None) -> None:
        self.view = view if isinstance(view, dict) else {}
        self.target: Any = target  # JSON, from the host's config file too: its type is checked (check_target)
        self.problems: list[str] = [str(p) for p in (self.view.get("problems") or [])]
        config = self.view.get("config")
        self.config: dict[str, Any] | None = config if isinstance(config, dict) else None
        self._collect_tensors()

    # ---- the view ----------------------------------------------------------------

    def _collect_tensors(self) -> None:
        files = self.view.get("files") or {}
        index = self.view.get("index") or {}
        weight_map = (index.get("weight_map") or {}) if isinstance(index, dict) else {}
        self.tensors: dict[str, tuple[str, dict[str, Any]]] = {}
        unreadable = set()
        for fname in sorted(files):
            entry = files[fname]
            tensors = entry.get("tensors") if isinstance(entry, dict) else None
            if not isinstance(tensors, dict):
                unreadable.add(fname)
                continue
            for tname, info in tensors.items():
                if isinstance(info, dict):
                    self.tensors.setdefault(tname, (fname, info))
        # Tensors we cannot see because their file is missing or unreadable: the reader
        # has reported that file already; don't repeat it once per tensor.
        self.unavailable = {t for t, f in weight_map.items() if f in unreadable or f not in files}
        # Without an index we cannot tell what an unreadable file held: skip presence checks.
        self.blind = not files or (not weight_map and bool(unreadable))
        if weight_map:
            self.weights_label = INDEX
        elif len(files) == 1:
            self.weights_label = next(iter(files))
        else:
            self.weights_label = "weights"

    # ---- config ------------------------------------------------------------------

    def _int(self, key: str, *, required: bool = True) -> int | None:
        assert self.config is not None
        if key not in self.config:
            if required:
                self.problems.append(f"{CONFIG}: {key} is missing")
            return None
        value = self.config[key]
        if not _is_int(value) or value <= 0:
            self.problems.append(f"{CONFIG}: {key} is {value!r}, expected a positive integer")
            return None
        return value

    def check_config(self) -> None:
        self.hidden = self.vocab = self.draft_vocab = self.target_hidden = None
        self.heads = self.kv_heads = self.head_dim = self.intermediate = None
        self.aux: list[int] | None = None
        if self.config is None:
            return  # the reader reported why
        arch = self.config.get("architectures")
        if arch is None:
            self.problems.append(
                f"{CONFIG}: architectures is missing, expected [\"{EXPECTED_ARCHITECTURE}\"]")
        elif not (isinstance(arch, list) and any(a in ACCEPTED_ARCHITECTURES for a in arch)):
            self.problems.append(
                f"{CONFIG}: architectures is {arch!r}, expected {EXPECTED_ARCHITECTURE}")

        layers = self._int("num_hidden_layers")
        if layers is not None and layers != 1:
            self.problems.append(f"{CONFIG}: num_hidden_layers is {layers}, expected 1 "
                                 f"(an EAGLE-3 drafter has one decoder layer)")
        self.hidden = self._int("hidden_size")
        self.vocab = self._int("vocab_size")
        self.intermediate = self._int("intermediate_size")
        self.draft_vocab = self._int("draft_vocab_size", required=False)
        if "draft_vocab_size" not in self.config:
            self.draft_vocab = self.vocab  # vLLM's default
        elif (self.draft_vocab is not None and self.vocab is not None
              and self.draft_vocab > self.vocab):
            self.problems.append(f"{CONFIG}: draft_vocab_size {self.draft_vocab} is larger "
                                 f"than vocab_size {self.vocab}")
        self.target_hidden = self._int("target_hidden_size", required=False)
        if "target_hidden_size" not in self.config:
            self.target_hidden = self.hidden  # vLLM's default

        self.heads = self._int("num_attention_heads")
        self.kv_heads = self._int("num_key_value_heads", required=False)
        if "num_key_value_heads" not in self.config:
            self.kv_heads = self.heads
        if self.heads and self.kv_heads and self.heads % self.kv_heads:
            self.problems.append(f"{CONFIG}: num_attention_heads {self.heads} is not a "
                                 f"multiple of num_key_value_heads {self.kv_heads}")
        if "head_dim" in self.config and self.config["head_dim"] is not None:
            self.head_dim = self._int("head_dim")
        elif self.hidden and self.heads:
            if self.hidden % self.heads:
                self.problems.append(
                    f"{CONFIG}: hidden_size {self.hidden} is not divisible by "
                    f"num_attention_heads {self.heads} (or set head_dim)")
            else:
                self.head_dim = self.hidden // self.heads
        self._check_aux_ids()

    def _aux_list(self, value: Any, key: str) -> list[int] | None:
        if not isinstance(value, list) or not all(_is_int(i) for i in value):
            self.problems.append(f"{CONFIG}: {key} is {value!r}, expected a list of layer "
                                 f"numbers")
            return None
        return value

    def _check_aux_ids(self) -> None:
        assert self.config is not None
        # vLLM reads the top-level key; the nested one only from 0.22 on.
        top = nested = None
        if self.config.get(AUX_KEY) is not None:
            top = self._aux_list(self.config[AUX_KEY], AUX_KEY)
        eagle_config = self.config.get("eagle_config")
        if isinstance(eagle_config, dict) and eagle_config.get(AUX_KEY) is not None:
            nested = self._aux_list(eagle_config[AUX_KEY], f"eagle_config.{AUX_KEY}")
        if top is not None and nested is not None and top != nested:
            self.problems.append(f"{CONFIG}: {AUX_KEY} {top} differs from "
                                 f"eagle_config.{AUX_KEY} {nested}")
        aux = top if top is not None else nested
        if aux is None:
            return
        self.aux = aux
        if any(i < 0 for i in aux):
            self.problems.append(f"{CONFIG}: {AUX_KEY} {aux} has negative layer ids")
        if len(set(aux)) != len(aux):
            self.problems.append(f"{CONFIG}: {AUX_KEY} {aux} has duplicates")
        if len(aux) != NUM_AUX_HIDDEN_STATES:
            self.problems.append(
                f"{CONFIG}: {AUX_KEY} has {len(aux)} entries, expected "
                f"{NUM_AUX_HIDDEN_STATES} (fc.weight takes {NUM_AUX_HIDDEN_STATES} target "
                f"hidden states)")

    # ---- tensors -----------------------------------------------------------------

    def _tensor(self, name: str, dtype: str | None, shape: Shape, desc: str,
                required: bool = True) -> None:
        """dtype None: any floating-point dtype."""
        if name not in self.tensors:
            if required and not self.blind and name not in self.unavailable:
                want = f"{dtype} {_fmt_shape(shape)}" if dtype else f"shape {_fmt_shape(shape)}"
                self.problems.append(f"{self.weights_label}: {name} is missing, "
                                     f"expected {want} ({desc})")
            return
        fname, info = self.tensors[name]
        actual_dtype = info.get("dtype")
        if dtype is not None and actual_dtype != dtype:
            self.problems.append(f"{fname}: {name} has dtype {actual_dtype}, expected {dtype}")
        elif dtype is None and actual_dtype not in FLOAT_DTYPES:
            self.problems.append(f"{fname}: {name} has dtype {actual_dtype}, expected a "
                                 f"floating-point dtype (F32, F16 or BF16)")
        actual = info.get("shape")
        if not isinstance(actual, list) or len(actual) != len(shape) or any(
                want is not None and got != want for got, want in zip(actual, shape)):
            self.problems.append(f"{fname}: {name} has shape {actual}, expected "
                                 f"{_fmt_shape(shape)} ({desc})")

    def check_tensors(self) -> None:
        h, th = self.hidden, self.target_hidden
        self._tensor("d2t", "I64", [self.draft_vocab], "[draft_vocab_size]")
        # t2d should also sum to draft_vocab_size; that needs the tensor data, which the
        # header-only reader does not read, so it is not checked here.
        self._tensor("t2d", "BOOL", [self.vocab], "[vocab_size]")
        self._tensor("fc.weight", None, [h, _mul(NUM_AUX_HIDDEN_STATES, th)],
                     f"[hidden_size, {NUM_AUX_HIDDEN_STATES}*target_hidden_size]")
        self._tensor("lm_head.weight", None, [self.draft_vocab, h],
                     "[draft_vocab_size, hidden_size]")
        self._tensor("norm.weight", None, [h], "[hidden_size]")
        self._tensor("embed_tokens.weight", None, [self.vocab, h], "[vocab_size, hidden_size]",
                     required=False)
        self._check_layer()

    def _check_layer(self) -> None:
        present = [p for p in LAYER_PREFIXES if any(t.startswith(p) for t in self.tensors)]
        extra = sorted({t.split(".")[1] for t in self.tensors
                        if t.startswith("layers.") and t.split(".")[1] not in ("0",)},
                       key=lambda s: (len(s), s))
        if extra:
            self.problems.append(f"{self.weights_label}: has tensors of layer(s) "
                                 f"{', '.join(extra)} (layers.N.*), but an EAGLE-3 drafter "
                                 f"has one decoder layer")
        if len(present) == 2:
            self.problems.append(f"{self.weights_label}: both midlayer.* and layers.0.* "
                                 f"tensors are present; vLLM renames midlayer.* to "
                                 f"layers.0.*, keep only one set")
        if not present:
            hidden_away = any(t.startswith(LAYER_PREFIXES) for t in self.unavailable)
            if not self.blind and not hidden_away:
                self.problems.append(f"{self.weights_label}: no decoder layer weights, "
                                     f"expected midlayer.* (or layers.0.*) tensors")
            return
        p = present[0]
        h, two_h, inter = self.hidden, _mul(2, self.hidden), self.intermediate
        q_out = _mul(self.heads, self.head_dim)
        kv_out = _mul(self.kv_heads, self.head_dim)
        attn, mlp = f"{p}self_attn.", f"{p}mlp."
        if f"{attn}qkv_proj.weight" in self.tensors:
            self._tensor(f"{attn}qkv_proj.weight", None, [_add(q_out, kv_out, kv_out), two_h],
                         "[(num_attention_heads+2*num_key_value_heads)*head_dim, "
                         "2*hidden_size]")
        else:
            self._tensor(f"{attn}q_proj.weight", None, [q_out, two_h],
                         "[num_attention_heads*head_dim, 2*hidden_size]")
            for proj in ("k_proj", "v_proj"):
                self._tensor(f"{attn}{proj}.weight", None, [kv_out, two_h],
                             "[num_key_value_heads*head_dim, 2*hidden_size]")
        self._tensor(f"{attn}o_proj.weight", None, [h, q_out],
                     "[hidden_size, num_attention_heads*head_dim]")
        if f"{mlp}gate_up_proj.weight" in self.tensors:
            self._tensor(f"{mlp}gate_up_proj.weight", None, [_mul(2, inter), h],
                         "[2*intermediate_size, hidden_size]")
        else:
            for proj in ("gate_proj", "up_proj"):
                self._tensor(f"{mlp}{proj}.weight", None, [inter, h],
                             "[intermediate_size, hidden_size]")
        self._tensor(f"{mlp}down_proj.weight", None, [h, inter],
                     "[hidden_size, intermediate_size]")
        for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            self._tensor(f"{p}{norm}.weight", None, [h], "[hidden_size]")

    # ---- target ------------------------------------------------------------------

    def _target_int(self, key: str) -> int | None:
        assert isinstance(self.target, dict)
        value = self.target.get(key)
        text_config = self.target.get("text_config")  # multimodal targets (e.g. Kimi-K2.5)
        if value is None and isinstance(text_config, dict):
            value = text_config.get(key)
        if value is None:
            return None  # not given: not checked
        if not _is_int(value) or value <= 0:
            self.problems.append(f"target: {key} is {value!r}, expected a positive integer")
            return None
        return value

    def check_target(self) -> None:
        if self.target is None:
            return
        if not isinstance(self.target, dict):
            self.problems.append(f"target: expected a config mapping, got "
                                 f"{type(self.target).__name__}")
            return
        t_hidden = self._target_int("hidden_size")
        t_vocab = self._target_int("vocab_size")
        t_layers = self._target_int("num_hidden_layers")
        if self.config is None:
            return
        if t_hidden is not None and self.target_hidden is not None and t_hidden != self.target_hidden:
            if "target_hidden_size" in self.config:
                self.problems.append(f"{CONFIG}: target_hidden_size is {self.target_hidden}, "
                                     f"but the target's hidden_size is {t_hidden}")
            else:
                self.problems.append(
                    f"{CONFIG}: target_hidden_size is not set, so it defaults to hidden_size "
                    f"{self.target_hidden}, but the target's hidden_size is {t_hidden}; set "
                    f"target_hidden_size to {t_hidden}")
        if t_vocab is not None and self.vocab is not None and t_vocab != self.vocab:
            self.problems.append(f"{CONFIG}: vocab_size is {self.vocab}, but the target's "
                                 f"vocab_size is {t_vocab}")
        if t_layers is None:
            return
        # Layer ids as vLLM >= 0.18 counts them: 0 is the embedding output, k the output
        # of target layer k, so the largest valid id is the target's layer count.
        if self.aux is not None:
            beyond = [i for i in self.aux if i > t_layers]
            if beyond:
                self.problems.append(
                    f"{CONFIG}: {AUX_KEY} {self.aux}: {', '.join(map(str, beyond))} "
                    f"{'is' if len(beyond) == 1 else 'are'} beyond the target's {t_layers} "
                    f"layers (valid ids are 0..{t_layers})")
        elif self.config.get(AUX_KEY) is None:
            default = [2, t_layers // 2, t_layers - 3]  # vLLM's default for Llama targets
            if any(i < 0 or i > t_layers for i in default):
                self.problems.append(
                    f"{CONFIG}: {AUX_KEY} is not set, and vLLM's Llama default "
                    f"(2, L//2, L-3) = {default} does not fit the target's {t_layers} layers; "
                    f"set it explicitly (valid ids are 0..{t_layers})")


def validate_eagle3_drafter(view: dict[str, Any], target: dict[str, Any] | None = None) -> list[str]:
    """All problems of the EAGLE-3 drafter described by ``view`` (from ``read_checkpoint``),
    one line each; ``[]`` means valid. ``target``: the target model's config (or just
    ``hidden_size``, ``vocab_size``, ``num_hidden_layers``) to check the pairing against."""
    v = _Validation(view, target)
    v.check_config()
    v.check_tensors()
    v.check_target()
    return v.problems
