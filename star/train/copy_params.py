"""The schema of the copy pretraining section: no logic, so params load without importing the trainer."""

from pydantic import BaseModel, ConfigDict, Field


class CopySpec(BaseModel):
    """How much copy data to make and of what shape."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="false: the stage passes the base model through untrained")
    examples: int = Field(32000, ge=1, description="number of synthetic copy sequences")
    cued_share: float = Field(0.0, ge=0.0, le=1.0, description="share of cue-value examples; the rest are span repeats")
    min_items: int = Field(4, ge=1, description="fewest items in a copied run")
    max_items: int = Field(32, ge=1, description="most items in a copied run")
    max_filler: int = Field(32, ge=0, description="most filler tokens between a run and its repeat")
    seed: int = Field(0, description="seed of the generator and of training")
    learning_rate: float = Field(
        2e-3, gt=0.0, le=1.0, description="learning rate, constant after warmup: the copy circuit forms abruptly, a few hundred steps in"
    )
    batch_size: int = Field(32, ge=1, description="sequences per optimiser step")
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0, description="share of the steps spent warming up")
    eval_examples: int = Field(100, ge=1, description="held-out sequences (another seed) for the copy accuracy")
