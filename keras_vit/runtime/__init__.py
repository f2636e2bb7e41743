"""How a model runs on this host: the dtype policy and compiler (`precision`, decided by the
measured `precision_probe`), the optimizer (`optimizers`) and the distribution strategy
(`distribute`). Backend-specific kernels live in `keras_vit.kernels`."""
