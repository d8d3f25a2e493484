"""The five pipeline assets: thin wrappers that read config and call :mod:`llm_assets.stages`."""

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from llm_assets.assets.reporting import materialize_result, sft_example_markdown
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    CATALOG_POOL,
    DEFAULT_INPUT_DIR,
    FILTERED_DOCUMENTS,
    GROUP_NAME,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    ROWS_REJECTED_CHECK,
    STAGE_CODE_VERSIONS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching import BatchSpec
from llm_assets.kernels.decontam import DecontamSpec, EvalSetError, check_eval_sets
from llm_assets.kernels.dedup import ExactDedupSpec, NearDedupSpec
from llm_assets.kernels.filters import FilterSpec, LabelSpec, LengthFilterSpec
from llm_assets.kernels.flagged import FlaggedWordsSpec, load_word_list
from llm_assets.kernels.ingest import IngestSpec, detect_format
from llm_assets.kernels.language import LanguageSpec
from llm_assets.kernels.mixture import MixtureSource, MixtureSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.pii import PII_KINDS, PiiSpec
from llm_assets.kernels.quality import QualitySpec, RepetitionSpec
from llm_assets.kernels.tokenization import GPT2, TokenizerSpec
from llm_assets.paths import inside
from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import (
    DEFAULT_ROWS_PER_SHARD,
    list_input_files,
    run_raw_documents,
)
from llm_assets.stages.tokenized_documents import run_tokenized_documents, tokenizer_metadata
from llm_assets.stages.training_batches.checks import (
    MIXTURE_WITHOUT_MEGATRON,
    _eos_id,
    augment_without_megatron,
    augment_without_prompts,
    balance_needs_labels,
    balance_without_megatron,
    label_needs_a_padded_layout,
)
from llm_assets.stages.training_batches.driver import run_training_batches
from llm_assets.warehouse.resource import WarehouseResource


class RawDocumentsConfig(dg.Config):
    input_dir: str = Field(
        DEFAULT_INPUT_DIR, description="Folder of input files (read recursively)"
    )
    text_field: str = Field("text", description="Field or column that holds the text")
    rows_per_shard: int = Field(
        DEFAULT_ROWS_PER_SHARD,
        description=(
            "Rows per shard, the unit of work, parallelism and restart: plain JSONL files are cut "
            "into ranges of this many lines and Parquet files into ranges of whole row groups "
            "when read; any other file is read whole, and the next stage cuts it into parts of "
            "whole row groups (8,192 rows each, fewer for large documents) of at most this many"
        ),
    )
    csv_delimiter: str = ","
    chat_field: str | None = Field(
        None,
        description=(
            "Chat SFT: the field or column holding a conversation (a list of {role, content} "
            "messages, or ShareGPT's {from, value}; tool calls and results read too) instead of "
            "text_field: an assistant's message is the text (learned, see chat_answers); the "
            "messages before it are the prompt, rendered by tokenized_documents' chat_template"
        ),
    )
    chat_answers: Literal["last", "every", "all"] = Field(
        "last",
        description=(
            "With chat_field: 'last' learns each conversation's last message (one row per "
            "conversation); 'every' gives one row per assistant message (not empty, not of "
            "weight 0), each with the whole conversation before it as its prompt; 'all' gives "
            "one row per conversation that learns those messages where they stand (the loss "
            "masks the other turns)"
        ),
    )


class NormalizeConfig(dg.Config):
    preset: Literal["default", "ascii_lower", "none"] = Field(
        "default", description="default keeps meaning; ascii_lower is the published study's rule"
    )
    unicode_form: Literal["NFC", "NFKC"] = "NFC"
    strip_html: bool = False
    pii: Literal["redact", "reject", "off"] = Field(
        "redact",
        description="redact: replace emails, phones, IPs, cards, IBANs, SSNs with <EMAIL>-style "
        "placeholders (counts in pii_redactions); reject: drop documents denser than "
        "pii_max_density (the rest are redacted); off",
    )
    pii_kinds: list[str] = Field(list(PII_KINDS), description="Which kinds of PII to look for")
    pii_max_density: float = Field(0.05, description="reject mode: PII matches per word")


class TokenizeConfig(dg.Config):
    tokenizer: str = Field(
        GPT2, description="'gpt2' (offline) or a path to tokenizer.json / an HF tokenizer folder"
    )
    engine: Literal["auto", "tiktoken", "hf"] = "auto"
    threads: int = Field(1, description="Tokenizer threads inside each worker")
    prompt_template: str | None = Field(
        None,
        description="SFT: format template over the record's fields, tokenized before the text "
        "(the response); its tokens are masked out of the labels",
    )
    chat_template: str | None = Field(
        None,
        description="Chat SFT (raw_documents' chat_field): 'chatml', 'tokenizer' (the "
        "tokenizer folder's own template) or a Jinja chat template (as in a "
        "tokenizer_config.json) rendering the conversation before the answer into the prompt, "
        "whose tokens are masked out of the labels",
    )


class QualityConfig(dg.Config):
    """Gopher quality heuristics (datatrove's defaults); a bound set to null is off."""

    enabled: bool = True
    min_words: int | None = 50
    max_words: int | None = 100_000
    min_mean_word_length: float | None = 3.0
    max_mean_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    min_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2


class RepetitionConfig(dg.Config):
    """Gopher repetition rules (datatrove's defaults); a bound set to null is off."""

    enabled: bool = True
    max_dup_line_ratio: float | None = 0.3
    max_dup_para_ratio: float | None = 0.3
    max_dup_line_char_ratio: float | None = 0.2
    max_dup_para_char_ratio: float | None = 0.2
    top_ngram_char_ratios: dict[str, float] = Field(
        {"2": 0.20, "3": 0.18, "4": 0.16},
        description="n -> max share of characters in the most frequent n-gram",
    )
    dup_ngram_char_ratios: dict[str, float] = Field(
        {"5": 0.15, "6": 0.14, "7": 0.13, "8": 0.12, "9": 0.11, "10": 0.10},
        description="n -> max share of characters in duplicated n-grams",
    )


class LanguageConfig(dg.Config):
    enabled: bool = Field(True, description="Identify the language (columns language, score)")
    languages: list[str] = Field(
        ["en"], description="Languages to keep (ISO 639-1); empty: annotate only, keep all"
    )
    min_score: float = Field(0.65, description="Minimum probability of the language")
    max_chars: int = Field(
        500,
        description=(
            "At most this many characters are read from the start of each document: 100 first, "
            "and up to max_chars for documents identified with a score below 0.9"
        ),
    )


class FlaggedWordsConfig(dg.Config):
    enabled: bool = True
    path: str | None = Field(
        None, description="Word list (one per line); default: the shipped English list"
    )
    max_density: float = Field(0.01, description="Flagged words per word above which to drop")


class DedupConfig(dg.Config):
    exact: bool = Field(True, description="Drop exact duplicates (SHA-256 of the text)")
    near: bool = Field(True, description="Drop near duplicates (MinHash LSH)")
    ngram: int = Field(5, description="Words per shingle")
    num_perm: int = Field(112, description="MinHash permutations")
    bands: int = Field(14, description="LSH bands (num_perm must be a multiple)")
    threshold: float = Field(0.8, description="Estimated Jaccard at which documents cluster")


class DecontaminateConfig(dg.Config):
    paths: list[str] = Field(
        [],
        description="Eval sets whose text must not be trained on: files or folders (every "
        "input file under them), read like raw_documents' input, under the data root. Empty: "
        "no decontamination",
    )
    fields: list[str] = Field(
        ["text"],
        description="The field (column) of each eval record's text, which every record must "
        "have, then fields checked too when a record has them (strings, or lists of strings "
        "such as answer choices)",
    )
    ngram: int = Field(13, description="A document sharing this many consecutive words is dropped")
    min_ngram: int = Field(
        8,
        description="Eval texts shorter than ngram words but of at least this many are "
        "matched whole; shorter ones are not checked",
    )


class FilterConfig(dg.Config):
    min_tokens: int = Field(10, description="Drop documents with fewer tokens (study: 10)")
    max_tokens: int | None = Field(None, description="Drop documents with more tokens")
    label_field: str | None = Field(
        None, description="Record field to carry as the class label (e.g. rating)"
    )
    label_mapping: dict[str, str] | None = Field(
        None, description="Map label values, e.g. {'1': 'negative', '5': 'positive'}"
    )
    quality: QualityConfig = Field(default_factory=QualityConfig)
    repetition: RepetitionConfig = Field(default_factory=RepetitionConfig)
    flagged_words: FlaggedWordsConfig = Field(default_factory=FlaggedWordsConfig)
    language: LanguageConfig = Field(default_factory=LanguageConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    decontaminate: DecontaminateConfig = Field(default_factory=DecontaminateConfig)


class MixtureSourceConfig(dg.Config):
    name: str = Field(description="The source's name, in logs, rejects and metadata")
    files: list[str] = Field(
        description="Its input files: paths relative to raw_documents' input_dir, folders "
        "(every file below) or shell patterns over the path ('*' matches '/' too), e.g. "
        "['code/', '*.py.jsonl']. A file belongs to the first source that names it"
    )
    weight: float = Field(description="Its weight (> 0; the weights need not sum to 1)")


class MixtureConfig(dg.Config):
    sources: list[MixtureSourceConfig] = Field(
        [],
        description="The sources of the train split (at least two), each with its files and "
        "weight; every input file must belong to one. Empty: no mixture",
    )
    by: Literal["tokens", "documents"] = Field(
        "tokens", description="Weigh the sources by their documents' tokens, or by documents"
    )
    mode: Literal["undersample", "oversample"] = Field(
        "undersample",
        description="undersample: no document more than once, the sources over their share "
        "cut down (rejects 'mixture_undersampled'); oversample: no document left out, the "
        "sources under their share repeated",
    )
    max_copies: int | None = Field(
        None,
        description="oversample: at most this many times each document (a source that would "
        "need more stays below its share). Null: no cap",
    )


class BatchesConfig(dg.Config):
    layout: Literal["packed", "padded", "bucketed"] = Field(
        "packed",
        description="packed: EOS-joined fixed blocks, padding-free; padded: one document per "
        "sequence with attention mask and labels; bucketed: padded within length buckets",
    )
    seq_len: int = Field(1024, description="Tokens per sequence (the maximum for padded layouts)")
    seed: int = Field(0, description="Seed of the shuffle, the split and the batch order")
    validation_fraction: float = Field(0.05, description="Share of documents in validation")
    shuffle_buckets: int = Field(
        1,
        description="Minimum shuffle buckets (files per split); more when one would hold "
        "over 8 MB of token ids",
    )
    drop_remainder: bool = Field(False, description="packed: drop the last partial block")
    overflow: Literal["split", "truncate"] = Field(
        "split", description="packed: long documents continue in the next block, or are cut"
    )
    pad_to: Literal["seq_len", "longest"] = Field(
        "seq_len", description="padded: pad to seq_len or to the longest of each batch"
    )
    batch_size: int = Field(8, description="Sequences per batch (pad_to=longest, bucketed)")
    bucket_boundaries: list[int] | None = Field(
        None, description="bucketed: upper token bounds of the length buckets (default: derived)"
    )
    length_buckets: int = Field(16, description="bucketed: buckets derived from the lengths")
    balance: Literal["none", "oversample", "undersample"] = Field(
        "none",
        description="Labelled data (filtered_documents' label_field): even out the classes of "
        "the train split. oversample: repeat documents of the smaller classes up to the "
        "largest; undersample: keep as many of each class as the smallest has (the rest are "
        "rejects, 'undersampled'). Validation is left as it is",
    )
    max_copies: int | None = Field(
        None,
        description="oversample: at most this many times each document (itself included; "
        "times augment_copies + 1 with augment); a class that would need more stays smaller. "
        "Null: no cap",
    )
    augment: Literal["none", "eda"] = Field(
        "none",
        description="eda: every copy of a train document (balance: oversample, "
        "augment_copies) is a variant of it, one seeded word edit (deletion, swap or "
        "insertion of about augment_rate of its words), not the same tokens again. Plain "
        "documents only (not SFT or chat rows); validation is never augmented",
    )
    augment_copies: int = Field(
        0,
        description="augment: eda: this many variants of every train document besides "
        "itself (after the balance, whose counts they multiply)",
    )
    augment_rate: float = Field(
        0.1, description="augment: eda: share of a copy's words its edit changes (0-0.5]"
    )
    mixture: MixtureConfig = Field(
        default_factory=MixtureConfig,
        description="The train split made of several sources in given proportions (by tokens "
        "or documents), its documents kept, left out or repeated; validation is left as it is",
    )
    zstd_level: int = Field(3, description="ZSTD level of the batch files (1-22)")
    megatron: bool = Field(
        False, description="Also write a Megatron-LM indexed dataset (.bin/.idx) per split"
    )


def _check(asset: str) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            ROWS_REJECTED_CHECK,
            asset=asset,
            description="rows in = rows out + rows rejected, and rows in = upstream rows out",
        )
    ]


def _context(
    context: dg.AssetExecutionContext, compute: ComputeResource, warehouse: WarehouseResource
) -> StageContext:
    catalog = warehouse.catalog()
    compute.use_warehouse_catalog(str(catalog.path))
    return StageContext(
        warehouse_root=warehouse.root_path,
        catalog=catalog,
        compute=compute,
        log=context.log,
        run_id=context.run.run_id,
        backend=compute.backend,
    )


def _asset_kwargs(name: str) -> dict[str, Any]:
    return {
        "group_name": GROUP_NAME,
        "kinds": {"parquet", "duckdb"},
        "code_version": STAGE_CODE_VERSIONS[name],
        "pool": CATALOG_POOL,
        "check_specs": _check(name),
    }


def validate_run_config(
    run_config: dict[str, Any] | None, data_root: Path, steps: Collection[str] | None = None
) -> None:
    """Turn every step's config into its spec. Every asset calls this first, so whichever step
    a run starts with, a bad setting of any of its steps fails the run there, before any shard
    is computed, with a message naming the op and the setting. (Dagster checks only the
    settings' types when the run starts; a step left out of the run has no config in it and is
    checked with its defaults.)

    With ``training_batches`` among ``steps`` (the run's assets, :func:`run_steps`; None: all),
    the tokenizer must also have the EOS token that step's layout needs (:func:`_check_eos`),
    and a ``label_field`` needs a layout with a label column (``padded`` or ``bucketed``; a
    ``packed`` block joins documents and would drop every label); ``balance`` needs a
    ``label_field`` (when the run filters too) and no Megatron export; ``augment`` no Megatron
    export and (when the run tokenizes too) no prompt or chat template. A run without that step is
    not held to its defaults there: it cannot even carry its config (``training_batches`` checks
    its input for a ``label`` column itself).

    With ``raw_documents`` among ``steps``, no eval file of ``decontaminate`` may also be one of
    its input files (:func:`_check_eval_sets_are_not_input`).

    The same builders as the assets', so nothing is checked twice in two ways. Cheap for the
    defaults: GPT-2 is not built, only a custom flagged-word list is read (once per process),
    and a local tokenizer is built once per process while its files are unchanged. Raises
    :class:`~llm_assets.stages.engine.StageInputError`.
    """
    ops = (run_config or {}).get("ops") or {}

    def op_config(op: str) -> dict[str, Any]:
        return (ops.get(op) or {}).get("config") or {}

    with _config_errors(RAW_DOCUMENTS):
        raw_config = RawDocumentsConfig(**op_config(RAW_DOCUMENTS))
        ingest = ingest_spec(raw_config)
    with _config_errors(NORMALIZED_DOCUMENTS):
        normalize_spec(NormalizeConfig(**op_config(NORMALIZED_DOCUMENTS)))
    with _config_errors(TOKENIZED_DOCUMENTS):
        tokenizer = tokenizer_spec(TokenizeConfig(**op_config(TOKENIZED_DOCUMENTS)), data_root)
    with _config_errors(FILTERED_DOCUMENTS):
        filters = filter_spec(FilterConfig(**op_config(FILTERED_DOCUMENTS)), data_root)
    with _config_errors(TRAINING_BATCHES):
        batches_config = BatchesConfig(**op_config(TRAINING_BATCHES))
        batches = _batch_spec(batches_config)
    if filters.decontam is not None and (steps is None or RAW_DOCUMENTS in steps):
        _check_eval_sets_are_not_input(filters.decontam, raw_config.input_dir, data_root)
    both = {RAW_DOCUMENTS, TOKENIZED_DOCUMENTS}
    unprompted = tokenizer.chat_template is None and tokenizer.prompt_template is None
    if (steps is None or both <= steps) and ingest.chat_field is not None and unprompted:
        raise StageInputError(
            f"{RAW_DOCUMENTS}.config.chat_field is {ingest.chat_field!r} but "
            f"{TOKENIZED_DOCUMENTS}.config.chat_template is not set: each answer would be "
            "tokenized without the conversation before it (and learned as if unprompted). "
            "Set chat_template: chatml, tokenizer (the tokenizer folder's own template) or "
            "a Jinja chat template"
        )
    if steps is None or TRAINING_BATCHES in steps:
        _check_eos(tokenizer, batches, megatron=batches_config.megatron)
        if filters.label is not None and batches.layout == "packed":
            raise StageInputError(label_needs_a_padded_layout(batches.layout))
        if batches.balance != "none" and batches_config.megatron:
            raise StageInputError(balance_without_megatron(batches.balance))
        labels_unset = filters.label is None and (steps is None or FILTERED_DOCUMENTS in steps)
        if batches.balance != "none" and labels_unset:
            raise StageInputError(balance_needs_labels(batches.balance))
        if batches.mixture is not None and batches_config.megatron:
            raise StageInputError(MIXTURE_WITHOUT_MEGATRON)
        if batches.augment != "none" and batches_config.megatron:
            raise StageInputError(augment_without_megatron(batches.augment))
        tokenizing = steps is None or TOKENIZED_DOCUMENTS in steps
        if batches.augment != "none" and tokenizing and not unprompted:
            raise StageInputError(augment_without_prompts(batches.augment))


def _check_eval_sets_are_not_input(decontam: DecontamSpec, input_dir: str, root: Path) -> None:
    """Refuse eval files that ``raw_documents`` also reads as input: their records would become
    training documents, the long ones rejected as ``contaminated`` (they hold their own n-grams)
    but those under ``min_ngram`` words kept, so a run would quietly train on part of the eval
    set. Only checked when the run ingests (else ``input_dir`` is not the one the documents came
    from); an input folder that cannot be listed is left to ``raw_documents`` to name."""
    try:
        inputs = {path.resolve(): rel for path, rel in list_input_files(input_dir, root)}
    except ValueError:  # StageInputError: raw_documents fails on it, with its own message
        return
    read = [(name, inputs[Path(path)]) for path, name in decontam.files if Path(path) in inputs]
    if read:
        listed = ", ".join(f"{name!r} (input file {rel!r})" for name, rel in read[:3])
        more = f" and {len(read) - 3} more" if len(read) > 3 else ""
        raise StageInputError(
            f"{FILTERED_DOCUMENTS}.config.decontaminate.paths: the eval file(s) {listed}{more} "
            f"are also read as input by {RAW_DOCUMENTS} (input_dir {input_dir!r}): their records "
            f"would be training documents, and those under min_ngram "
            f"({decontam.min_ngram}) words would be kept. Move the eval sets out of the input "
            "folder, or into a folder of it whose name starts with '_' or '.' (not read as input)"
        )


def run_steps(context: dg.AssetExecutionContext) -> frozenset[str]:
    """The steps (here: the assets) the run executes: those selected, or all of its job's."""
    keys = context.run.step_keys_to_execute
    if keys is None:
        keys = [node.name for node in context.job_def.nodes]
    return frozenset(keys)


def _check_eos(tokenizer: TokenizerSpec, batches: BatchSpec, *, megatron: bool) -> None:
    """Before any work, the check ``training_batches`` makes on its input's footer
    (:func:`~llm_assets.stages.training_batches.checks._eos_id`), made on the footer the tokenizer
    will write: else a tokenizer without EOS fails the last step, after tokenizing and filtering
    everything. A bare ``tokenizer.json`` is the usual cause: it names no special token's role,
    which the ``tokenizer_config.json`` that ``save_pretrained`` writes beside it does."""
    try:
        _eos_id(
            tokenizer_metadata(tokenizer),
            batches,
            megatron,
            sft=tokenizer.prompt_template is not None or tokenizer.chat_template is not None,
        )
    except StageInputError as exc:
        path = Path(tokenizer.name)
        if tokenizer.name == GPT2 or not path.is_file():
            raise
        folder = (
            f"its folder {str(path.parent)!r}, which holds one"
            if (path.parent / "tokenizer_config.json").is_file()
            else "a folder written by save_pretrained"
        )
        raise StageInputError(
            f"{exc}. {TOKENIZED_DOCUMENTS}: tokenizer {tokenizer.name!r} is a bare tokenizer "
            "file, which names no EOS (nor padding) token: transformers reads them from a "
            f"tokenizer_config.json; set tokenizer to {folder}"
        ) from exc


@contextmanager
def _config_errors(op: str) -> Iterator[None]:
    """Re-raise a bad setting found while building ``op``'s spec as a StageInputError that
    starts with the op's name (the spec's own message names the setting)."""
    try:
        yield
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError too
        raise StageInputError(f"{op}: {exc}") from exc


def ingest_spec(config: RawDocumentsConfig) -> IngestSpec:
    """How ``raw_documents`` reads its files (the spec checks its CSV delimiter)."""
    return IngestSpec(
        text_field=config.text_field,
        csv_delimiter=config.csv_delimiter,
        chat_field=config.chat_field,
        chat_answers=None if config.chat_answers == "last" else config.chat_answers,
    )


def normalize_spec(config: NormalizeConfig) -> NormalizeSpec:
    """The text rewrite of ``normalized_documents``, PII handling included."""
    return NormalizeSpec(
        preset=config.preset,
        unicode_form=config.unicode_form,
        strip_html=config.strip_html,
        pii=PiiSpec(
            mode=config.pii, kinds=tuple(config.pii_kinds), max_density=config.pii_max_density
        ),
    )


def tokenizer_spec(config: TokenizeConfig, data_root: Path) -> TokenizerSpec:
    """The tokenizer of ``tokenized_documents``. A tokenizer path is an input like any other:
    it must exist (the spec checks, on disk only) and resolve inside the data root. It is then
    built (once per process while its files are unchanged, and the driver needs it for the
    footers anyway), so a file transformers cannot read fails here, named, not at the first
    shard; GPT-2 ships with the package and is not built."""
    spec = TokenizerSpec(
        name=config.tokenizer,
        engine=config.engine,
        threads=config.threads,
        prompt_template=config.prompt_template,
        chat_template=config.chat_template,
    )
    if spec.name != GPT2:
        inside(spec.name, data_root, "tokenizer")
        spec.build()
    return spec


def filter_spec(config: FilterConfig, data_root: Path) -> FilterSpec:
    """The filter chain of ``filtered_documents`` from its run config. An enabled custom
    flagged-word list must resolve inside the data root and is read here (a missing, unreadable,
    non-UTF-8 or empty list is named as ``flagged_words.path``); a disabled one is never read."""
    label = None
    if config.label_field:
        label = LabelSpec(
            field=config.label_field, mapping=tuple(sorted((config.label_mapping or {}).items()))
        )
    elif config.label_mapping:
        raise ValueError("label_mapping is set but label_field is not: name the field to map")
    q, r, f, lang, d = (
        config.quality,
        config.repetition,
        config.flagged_words,
        config.language,
        config.dedup,
    )
    if f.enabled and f.path:
        inside(f.path, data_root, "flagged_words.path")
        try:
            load_word_list(f.path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"flagged_words.path {f.path!r}: {exc}") from exc
    return FilterSpec(
        length=LengthFilterSpec(min_tokens=config.min_tokens, max_tokens=config.max_tokens),
        label=label,
        quality=QualitySpec(**q.model_dump(exclude={"enabled"})) if q.enabled else None,
        repetition=RepetitionSpec(
            **r.model_dump(exclude={"enabled", "top_ngram_char_ratios", "dup_ngram_char_ratios"}),
            top_ngram_char_ratios=_ngram_bounds(r.top_ngram_char_ratios),
            dup_ngram_char_ratios=_ngram_bounds(r.dup_ngram_char_ratios),
        )
        if r.enabled
        else None,
        flagged=FlaggedWordsSpec(path=f.path, max_density=f.max_density) if f.enabled else None,
        language=LanguageSpec(
            languages=tuple(lang.languages), min_score=lang.min_score, max_chars=lang.max_chars
        )
        if lang.enabled
        else None,
        decontam=decontam_spec(config.decontaminate, data_root),
        exact_dedup=ExactDedupSpec() if d.exact else None,
        near_dedup=NearDedupSpec(
            ngram=d.ngram, num_perm=d.num_perm, bands=d.bands, threshold=d.threshold
        )
        if d.near
        else None,
    )


def decontam_spec(config: DecontaminateConfig, data_root: Path) -> DecontamSpec | None:
    """The eval sets of ``filtered_documents``' decontamination (None: no paths, off). Each path
    is a file or a folder (its input files, as ``raw_documents`` lists them) inside the data
    root; the files are read here, so an unreadable record or a missing field fails the run's
    first step, named (cached: later steps do not read them again)."""
    if not config.paths:
        return None
    files: list[tuple[str, str]] = []
    for given in config.paths:
        path = inside(given, data_root, "decontaminate.paths")
        if path.is_dir():
            try:
                found = list_input_files(path, data_root)
            except ValueError as exc:
                raise ValueError(f"decontaminate.paths {given!r}: {exc}") from exc
            files += [(str(file.resolve()), f"{given.rstrip('/')}/{rel}") for file, rel in found]
        elif path.is_file():
            try:
                detect_format(str(path))
            except ValueError as exc:
                raise ValueError(f"decontaminate.paths {given!r}: {exc}") from exc
            files.append((str(path), given))
        else:
            raise ValueError(f"decontaminate.paths {given!r}: no such file or folder")
    spec = DecontamSpec(
        files=tuple(dict.fromkeys(files)),
        fields=tuple(config.fields),
        ngram=config.ngram,
        min_ngram=config.min_ngram,
    )
    try:
        check_eval_sets(spec)
    except EvalSetError as exc:
        raise ValueError(f"decontaminate: {exc}") from exc
    return spec


def _ngram_bounds(bounds: dict[str, float]) -> tuple[tuple[int, float], ...]:
    try:
        return tuple(sorted((int(n), float(v)) for n, v in bounds.items()))
    except ValueError as exc:
        raise ValueError(f"n-gram bounds are keyed by n (an integer), got {bounds}") from exc


def _batch_spec(config: BatchesConfig) -> BatchSpec:
    if not 1 <= config.zstd_level <= 22:
        raise ValueError(f"zstd_level must be in [1, 22], got {config.zstd_level}")
    if config.bucket_boundaries == []:
        raise ValueError(
            "bucket_boundaries must hold at least one bound, or be null to derive them"
        )
    return BatchSpec(
        layout=config.layout,
        seq_len=config.seq_len,
        seed=config.seed,
        validation_fraction=config.validation_fraction,
        shuffle_buckets=config.shuffle_buckets,
        drop_remainder=config.drop_remainder,
        overflow=config.overflow,
        pad_to=config.pad_to,
        batch_size=config.batch_size,
        bucket_boundaries=(
            None if config.bucket_boundaries is None else tuple(config.bucket_boundaries)
        ),
        length_buckets=config.length_buckets,
        balance=config.balance,
        max_copies=config.max_copies,
        augment=config.augment,
        augment_copies=config.augment_copies,
        augment_rate=config.augment_rate,
        mixture=_mixture_spec(config.mixture),
    )


def _mixture_spec(config: MixtureConfig) -> MixtureSpec | None:
    """The mixture of ``config``, or None when it names no source."""
    if not config.sources:
        if config.max_copies is not None:
            raise ValueError("mixture.max_copies is set but mixture.sources is empty")
        return None
    return MixtureSpec(
        sources=tuple(
            MixtureSource(name=s.name, files=tuple(s.files), weight=s.weight)
            for s in config.sources
        ),
        by=config.by,
        mode=config.mode,
        max_copies=config.max_copies,
    )


@dg.asset(name=RAW_DOCUMENTS, **_asset_kwargs(RAW_DOCUMENTS))
def raw_documents(
    context: dg.AssetExecutionContext,
    config: RawDocumentsConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Every input file (JSONL, JSONL.gz/.zst, Parquet, CSV, TXT) as one row per document, with a
    stable ``doc_id`` and its source file and line; unreadable records are rejects with a reason."""
    validate_run_config(context.run.run_config, warehouse.data_root_path, run_steps(context))
    spec = ingest_spec(config)
    ctx = _context(context, compute, warehouse)
    report = run_raw_documents(
        ctx, config.input_dir, spec, config.rows_per_shard, data_root=warehouse.data_root_path
    )
    return materialize_result(report, ctx.catalog, None)


@dg.asset(name=NORMALIZED_DOCUMENTS, deps=[RAW_DOCUMENTS], **_asset_kwargs(NORMALIZED_DOCUMENTS))
def normalized_documents(
    context: dg.AssetExecutionContext,
    config: NormalizeConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """The documents' text after a named normalization preset."""
    validate_run_config(context.run.run_config, warehouse.data_root_path, run_steps(context))
    spec = normalize_spec(config)
    ctx = _context(context, compute, warehouse)
    report = run_normalized_documents(ctx, spec)
    return materialize_result(report, ctx.catalog, RAW_DOCUMENTS, preset=config.preset)


@dg.asset(
    name=TOKENIZED_DOCUMENTS, deps=[NORMALIZED_DOCUMENTS], **_asset_kwargs(TOKENIZED_DOCUMENTS)
)
def tokenized_documents(
    context: dg.AssetExecutionContext,
    config: TokenizeConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Token ids (all of them, no truncation) and counts, with the tokenizer's name and
    vocabulary fingerprint in every shard's footer."""
    validate_run_config(context.run.run_config, warehouse.data_root_path, run_steps(context))
    spec = tokenizer_spec(config, warehouse.data_root_path)
    ctx = _context(context, compute, warehouse)
    report = run_tokenized_documents(ctx, spec)
    sft = {}
    if spec.prompt_template is not None or spec.chat_template is not None:
        example = sft_example_markdown(report, spec.build())
        sft = {"sft_example": dg.MetadataValue.md(example)} if example else {}
    return materialize_result(
        report,
        ctx.catalog,
        NORMALIZED_DOCUMENTS,
        tokens_per_second=round(report.extra.get("tokens", 0) / max(report.seconds, 1e-9), 1),
        **sft,
    )


@dg.asset(name=FILTERED_DOCUMENTS, deps=[TOKENIZED_DOCUMENTS], **_asset_kwargs(FILTERED_DOCUMENTS))
def filtered_documents(
    context: dg.AssetExecutionContext,
    config: FilterConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """The documents that pass every filter; each dropped one is a reject with reason and value."""
    validate_run_config(context.run.run_config, warehouse.data_root_path, run_steps(context))
    spec = filter_spec(config, warehouse.data_root_path)
    ctx = _context(context, compute, warehouse)
    report = run_filtered_documents(ctx, spec)
    return materialize_result(report, ctx.catalog, TOKENIZED_DOCUMENTS)


@dg.asset(name=TRAINING_BATCHES, deps=[FILTERED_DOCUMENTS], **_asset_kwargs(TRAINING_BATCHES))
def training_batches(
    context: dg.AssetExecutionContext,
    config: BatchesConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Shuffled (seeded), split into train/validation by document, and packed (padding-free) or
    padded into fixed-length sequences; ZSTD Parquet with the tokenizer and layout in its schema
    metadata."""
    validate_run_config(context.run.run_config, warehouse.data_root_path, run_steps(context))
    spec = _batch_spec(config)
    ctx = _context(context, compute, warehouse)
    report = run_training_batches(ctx, spec, config.zstd_level, megatron=config.megatron)
    tokens = report.extra.get("tokens", 0)
    padding = report.extra.get("padding_tokens", 0)
    return materialize_result(
        report,
        ctx.catalog,
        FILTERED_DOCUMENTS,
        layout=config.layout,
        seq_len=config.seq_len,
        padding_fraction=round(padding / max(tokens + padding, 1), 6),
    )


PIPELINE_ASSET_DEFS = [
    raw_documents,
    normalized_documents,
    tokenized_documents,
    filtered_documents,
    training_batches,
]
