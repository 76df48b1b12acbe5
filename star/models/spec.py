"""The built-in model's name and size, apart from the model so that reading a config imports no torch."""

from pydantic import BaseModel, ConfigDict, Field

BUILTIN_TINY = "builtin:tiny"


class TinySpec(BaseModel):
    """Size of the built-in model and its tokenizer."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(4096, ge=300)  # BPE vocabulary; added tokens come on top
    hidden_size: int = Field(256, ge=32)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int | None = Field(None, ge=1)
    max_position_embeddings: int = Field(2048, ge=64)
    seed: int = 0
