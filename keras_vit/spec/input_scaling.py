"""The input scalings a ViT's weights expect, as plain numbers (no Keras): the release's
[-1, 1] (pixel / 127.5 - 1), and the per-channel mean/std of models trained on ImageNet
normalisation (timm's `IMAGENET_DEFAULT_MEAN` / `_STD`) or OpenAI CLIP's (timm's
`OPENAI_CLIP_MEAN` / `_STD`). The data pipeline scales with them; the checkpoint readers
recognise a file's normalisation by them."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

MEAN_STD = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD), "clip": (CLIP_MEAN, CLIP_STD)}
"""Input scaling -> (mean, std) in [0, 1] pixel units, for the scalings other than
"[-1,1]"."""
