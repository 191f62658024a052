"""The contract of the tokenizer models (``tokenizer``, a packaged ``tokenizer.json``, and
``hf_tokenizer``, a checkpoint's own tokenizer): the config parameters the builder writes
(builder/spec/checkpoint.py for ``hf_tokenizer``; models.yaml's ``parameters:`` for ``tokenizer``)
and the models read, declared once.

Both packages link to this file as their ``contract.py``, so the repository writer copies it beside
``model.py`` and the model imports it as a sibling; the builder imports it from
``builder.python_models.hf_tokenizer.contract``. It imports nothing of the project.
"""

from __future__ import annotations

# -- config parameters (string values) -------------------------------------------------------------
MAX_LENGTH = "max_length"  # tokens kept of a text (truncation); hf_tokenizer requires it
