"""Building models: the encoder (`builder`), the named ViT and hybrid builders (`models`,
`hybrid`), a model from any checkpoint (`build_any`) or from any source the command line takes
(`model_source`), and the paper's fine-tuning step (`finetune`). Above `layers/` and
`checkpoints/`; sub-modules are imported on use (`keras_vit.ViT` and friends are the public
names)."""
