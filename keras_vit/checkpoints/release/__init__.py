"""The ViT release's own files: the release `.npz` reader and writer (`release_io`), the layouts
real `.npz` files use (JAX release `opt/target/`, big_vision `params/`, scanned blocks;
`layouts`) and the AugReg checkpoint names (`augreg`). Imports `base/` only."""
