"""Plain data about ViTs, with no Keras or TensorFlow import: the size table and the model
names (`configs`), the layer names of the release's layout (`layer_names`), the files of a
run directory (`run_config_file`, `kept_model`), the position-table resize methods
(`resize_methods`) and the image formats read (`image_formats`). The bottom layer: it imports
nothing else of keras_vit, so the command line and the checkpoint readers use it without
starting TensorFlow."""
