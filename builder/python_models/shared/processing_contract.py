"""The contract of the pre- and post-processing models around a core model: ``tokenizer`` (a packaged
``tokenizer.json``), and a Hugging Face checkpoint's ``hf_tokenizer``, ``hf_classification``,
``hf_token_classification`` and ``hf_cross_encoder``: the config parameters, tensor names and files
that the checkpoint tasks (builder/tasks/) write (models.yaml's ``parameters:`` for ``tokenizer``)
and the models read, declared once. A checkpoint's pipeline hands tensors from one model to the
next under these names. (``hf_image_processor`` has its own ``contract.py``: its files and ``pixel_values``.)

Each package links to this file as its ``contract.py``, so the repository writer copies it beside
``model.py`` and the model imports it as a sibling; the builder imports it from here. It imports
nothing of the project.
"""

from __future__ import annotations

# -- files of the version folder -------------------------------------------------------------------
CHECKPOINT_CONFIG = "config.json"  # the checkpoint's config: its labels (id2label) and problem type

# -- config parameters (string values) -------------------------------------------------------------
MAX_LENGTH = "max_length"  # tokens kept of a text (truncation); hf_tokenizer requires it
# hf_tokenizer's truncation strategy, as transformers' tokenizers name it (unset: longest_first);
# a text pair's is only_second, as the cross-encoder families truncate: the document, never the query
TRUNCATION = "truncation"
ONLY_SECOND = "only_second"

# -- tensors ---------------------------------------------------------------------------------------
TEXT = "TEXT"  # a request's texts (TYPE_STRING): the tokenizers' input, the pipeline's
IMAGE = "IMAGE"  # a request's encoded images (TYPE_STRING): an image pipeline's input
TEXT_PAIR = "TEXT_PAIR"  # each text's second text (TYPE_STRING): a pair's document, beside TEXT's query
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
OFFSET_MAPPING = "offset_mapping"  # hf_tokenizer's, for hf_token_classification
SPECIAL_TOKENS_MASK = "special_tokens_mask"  # hf_tokenizer's, for hf_token_classification
NUM_TOKENS = "NUM_TOKENS"  # hf_tokenizer's: each row's tokens before truncation; a pair pipeline answers it
LOGITS = "logits"  # the core model's output, the post-processing model's input
# hf_classification's outputs (SCORE: hf_cross_encoder's too, a pair's relevance)
LABEL = "LABEL"
SCORE = "SCORE"
SCORES = "SCORES"
# hf_token_classification's outputs
TOKENS = "TOKENS"
TOKEN_LABELS = "TOKEN_LABELS"
TOKEN_SCORES = "TOKEN_SCORES"
ENTITIES = "ENTITIES"  # a JSON list of the grouped entities, per text
