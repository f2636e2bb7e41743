"""The file names of a Hugging Face model folder (transformers' `CONFIG_NAME`,
`SAFE_WEIGHTS_NAME` and the image processor's `preprocessor_config.json`), in a module of
their own so that detection (`format_table`) and the reader (`hf_io`) share them without
importing each other."""

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
PREPROCESSOR = "preprocessor_config.json"
