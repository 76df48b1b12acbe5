"""Models the pipeline can train: any Hugging Face causal LM, or the built-in tiny one.

`star.models.spec` names and sizes the built-in model without importing torch;
`star.models.tiny` builds it, `star.models.base` prepares any base model.
"""
