"""The built-in tiny model: a small Qwen2 with a tokenizer trained on the task.

Tiny models learn the agent format quickly but fail to copy names and dates
from the query into calls and plans, partly because one name tokenises
differently after a space, a quote or a newline. Here every entity name is a
single added token, the same id in every context, and digits are one token
each. Identifiers whose digits differ only at the end (flight numbers F3331 and
F3332, dates 2022-03-04 and 2022-03-06) can be added tokens too
(`TinySpec.whole_identifiers`, off by default: SFT then memorises flight ids
instead of copying them, docs/learning.md).

The chat template is TRL's Qwen2.5 template, taken from the installed trl, so
TRL recognises it by equality: SFT swaps in its `{% generation %}` training
variant for `assistant_only_loss`, and GRPO's tool calling finds its parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
from transformers.utils.chat_template_utils import render_jinja_template
from trl.chat_template_utils import qwen2_5_chat_template

from star.io import atomic_dir
from star.models.spec import BUILTIN_TINY, BUILTINS, TinySpec

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)
# Plain added tokens, not special: decoding with skip_special_tokens=True
# (as GRPO does for completions) must keep them, the parser reads them.
TAG_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
)

# The template as TRL ships it; any edit would stop TRL recognising it.
CHAT_TEMPLATE: str = qwen2_5_chat_template


def _split_out(texts: Iterable[str], literals: Sequence[str]) -> Iterator[str]:
    """The texts with every literal cut out, so BPE spends no merges on them."""
    # Longest first, so a name wins over any name that is its prefix.
    pattern = re.compile("|".join(re.escape(s) for s in sorted(set(literals), key=lambda s: (-len(s), s))))
    for text in texts:
        for piece in pattern.split(text):
            if piece:
                yield piece


def train_tokenizer(
    corpus: Iterable[str], entity_names: Sequence[str], vocab_size: int = 4096
) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `corpus`, with each entity name one token."""
    texts = list(corpus)
    names = sorted({n for n in entity_names if n})
    clash = set(names) & set(SPECIAL_TOKENS + TAG_TOKENS)
    if clash:
        raise ValueError(f"entity names clash with special tokens: {sorted(clash)}")

    tok = Tokenizer(models.BPE())
    # The pipeline Qwen2Tokenizer rebuilds when AutoTokenizer loads a qwen2
    # directory, so the saved tokenizer behaves as the trained one. Its split
    # keeps digits one per piece.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_split_out(texts, SPECIAL_TOKENS + TAG_TOKENS + tuple(names)), trainer)

    # Not normalized and no strip: matched verbatim before pre-tokenization,
    # so the id is the same whatever is around it.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok.add_tokens([AddedToken(n, special=False, normalized=False) for n in names])

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        split_special_tokens=False,
    )


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A freshly initialised Qwen2 sized for CPU training."""
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
    head_dim = hidden_size // num_heads
    # GPU attention kernels (flash attention, vLLM) take only some head sizes;
    # multiples of 32 are the safe ones.
    if head_dim % 32:
        raise ValueError(
            f"head_dim = hidden_size / num_heads = {hidden_size} / {num_heads} = {head_dim} "
            "must be a multiple of 32"
        )
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        max_window_layers=num_layers,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    # Seeded on a forked RNG: same seed, same weights, caller's RNG untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
    return model


def make_tiny(out_dir: str | Path, corpus: Iterable[str], entity_names: Sequence[str], spec: TinySpec) -> Path:
    """Train the tokenizer, initialise the model, write both as one HF directory."""
    tokenizer = train_tokenizer(corpus, entity_names, spec.vocab_size)
    tokenizer.model_max_length = spec.max_position_embeddings
    model = build_model(
        tokenizer,
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        seed=spec.seed,
    )
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
    return out


def resolve_model_path(name_or_path: str, builtin_dir: str | Path) -> str:
    """A built-in name (`builtin:tiny`, `builtin:smollm2`) -> its built directory; anything else is a hub id or a path."""
    if name_or_path in BUILTINS:
        builtin_dir = Path(builtin_dir)
        if not (builtin_dir / "config.json").is_file() or not (builtin_dir / "tokenizer.json").is_file():
            builder = "star.models.tiny.make_tiny" if name_or_path == BUILTIN_TINY else "star.models.smollm2.make_smollm2"
            raise FileNotFoundError(
                f"{name_or_path} is not built: no model at {builtin_dir}. Build it first with "
                f"{builder} (the pipeline stage that writes it)."
            )
        return str(builtin_dir)
    if name_or_path.startswith("builtin:"):
        raise ValueError(f"unknown built-in model {name_or_path!r}; the built-in ones are {', '.join(BUILTINS)}")
    return name_or_path


def corpus_from_trajectories(
    messages_list: Iterable[Sequence[dict[str, Any]]],
    tool_schemas: Sequence[dict[str, Any]],
    system_prompt: str = "",
) -> list[str]:
    """Texts to train the tokenizer on, written as the model will read them (the domain's
    `system_prompt` too, for a tokenizer built before any trajectory)."""
    schemas = list(tool_schemas)
    # The template writes each schema with tojson, i.e. json.dumps defaults.
    texts = [system_prompt] * bool(system_prompt) + [json.dumps(s, ensure_ascii=False) for s in schemas]
    for messages in messages_list:
        rendered, _ = render_jinja_template(
            conversations=[list(messages)], tools=schemas or None, chat_template=CHAT_TEMPLATE
        )
        texts.append(rendered[0])
    return texts
