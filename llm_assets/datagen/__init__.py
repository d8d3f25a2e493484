"""Deterministic, offline generator of realistic text data, and the shipped sample corpus.

Four kinds of rows, all streamed (never a list of the whole corpus) and reproducible from a seed:

- :func:`.corpus.generate_records`: WikiText-2-like lines ``{"text", "title", "id"}``. Articles
  of encyclopedic prose (biographies, ships, storms, songs, films, games, battles, buildings,
  species, roads) built from real English words (:mod:`.vocabulary`) and sentence templates
  (:mod:`.templates`, filled by :mod:`.grammar`): a title heading, an introduction, sections with
  headings and paragraphs. By default the text is formatted like the raw WikiText-2 files
  (``" = = History = = \\n"`` headings, ``" , "`` and ``" @-@ "``); a small share of paragraphs is
  in German, French or Spanish, and a share of rows are exact or near duplicates of earlier rows.
- :func:`.reviews.generate_reviews`: Amazon-review-like rows ``review_id, rating, title, text``.
- :func:`.instructions.generate_instructions`: supervised fine-tuning rows ``instruction, input,
  output`` whose outputs are correct (arithmetic, capitals, translations, sorting, summaries of
  generated text).
- :func:`.chats.generate_chats`: conversations ``{"id", "messages"}`` (``{"role", "content"}``
  messages, an optional system prompt, 1 to 3 exchanges of the same tasks, ending with the
  assistant).

:func:`.writers.write_corpus` writes any of them as JSONL (plain, gzip, zstd), Parquet, CSV or
TXT (rows with a ``text``: not instructions or chats), chosen by the file suffix;
:func:`.sample.make_sample` regenerates ``data/sample/``, ``data/instructions/`` and
``data/chat/`` byte for byte. Command line (:mod:`.cli`): ``python -m llm_assets.datagen --help``.

Only the standard library, numpy, pyarrow and zstandard; no network. Sentences are filled template
by template with numpy draws over a chunk of rows, which is what makes a million rows take seconds.
"""
