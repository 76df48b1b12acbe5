"""Models the pipeline can train: any Hugging Face causal LM, or the built-in tiny one."""

from star.models.tiny import (
    BUILTIN_TINY,
    CHAT_TEMPLATE,
    TinySpec,
    build_model,
    corpus_from_trajectories,
    make_tiny,
    resolve_model_path,
    train_tokenizer,
)

__all__ = [
    "BUILTIN_TINY",
    "CHAT_TEMPLATE",
    "TinySpec",
    "build_model",
    "corpus_from_trajectories",
    "make_tiny",
    "resolve_model_path",
    "train_tokenizer",
]
