"""Backend-specific kernels, below `keras_vit.layers`: `dispatch` picks one per layer at
build time; `tensorflow`, `tf_checks` and `tf_allocator` hold TensorFlow's fast paths, its
run-time checks and its CPU allocator setting. Importing this package imports no backend."""
