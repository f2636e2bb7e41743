"""Published checkpoint names: the release's files in the `vit_models` bucket and the download
cache (`registry`), the ViT family's published timm / Hugging Face names (`family_checkpoints`)
and whether a `weights=` name keeps its `pre_logits` (`prediction_head`). Imports `base/` and
`release/`."""
