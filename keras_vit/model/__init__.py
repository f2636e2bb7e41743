"""Building models: the builder core (`builder`: stem -> patch tokens -> encoder -> head), its
argument checks (`arguments`) and head (`head`); the named ViT and hybrid builders (`vit`,
`hybrid`); a model from a keyword dict or a checkpoint file (`from_kwargs`) or from any source
the command line takes (`from_source`); and the paper's fine-tuning step (`finetune`). Above
`layers/` and `checkpoints/`; sub-modules are imported on use (`keras_vit.ViT` and friends are
the public names)."""
