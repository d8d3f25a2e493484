"""The run config of ``filtered_documents`` is built from the filters' specs: every key and
default of the hand-written config it replaces, and the specs' refusals."""

from __future__ import annotations

import dataclasses

import pytest

from llm_assets.assets.filter_config import FilterConfig, filter_spec
from llm_assets.kernels.decontam import DecontamSpec
from llm_assets.kernels.dedup import ExactDedupSpec, NearDedupSpec
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.filters.gopher_quality import QualitySpec
from llm_assets.kernels.filters.gopher_repetition import RepetitionSpec
from llm_assets.kernels.filters.label import LabelSpec
from llm_assets.kernels.filters.language import LanguageSpec
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.filters.registry import setting_of

DEFAULTS = {
    "min_tokens": 10,
    "max_tokens": None,
    "label_field": None,
    "label_mapping": None,
    "quality": {
        "enabled": True,
        "min_words": 50,
        "max_words": 100_000,
        "min_mean_word_length": 3.0,
        "max_mean_word_length": 10.0,
        "max_symbol_word_ratio": 0.1,
        "max_bullet_lines_ratio": 0.9,
        "max_ellipsis_lines_ratio": 0.3,
        "min_alpha_words_ratio": 0.8,
        "min_stop_words": 2,
    },
    "repetition": {
        "enabled": True,
        "max_dup_line_ratio": 0.3,
        "max_dup_para_ratio": 0.3,
        "max_dup_line_char_ratio": 0.2,
        "max_dup_para_char_ratio": 0.2,
        "top_ngram_char_ratios": {"2": 0.20, "3": 0.18, "4": 0.16},
        "dup_ngram_char_ratios": {"5": 0.15, "6": 0.14, "7": 0.13, "8": 0.12, "9": 0.11, "10": 0.1},
    },
    "flagged_words": {"enabled": True, "path": None, "max_density": 0.01},
    "language": {"enabled": True, "languages": ["en"], "min_score": 0.65, "max_chars": 500},
    "dedup": {
        "exact": True,
        "near": True,
        "ngram": 5,
        "num_perm": 112,
        "bands": 14,
        "threshold": 0.8,
    },
    "decontaminate": {"paths": [], "fields": ["text"], "ngram": 13, "min_ngram": 8},
}


def test_every_key_and_default_of_the_run_config(tmp_path):
    dumped = FilterConfig().model_dump()
    assert {k: dumped[k] for k in DEFAULTS} == DEFAULTS
    assert filter_spec(FilterConfig(), tmp_path) == FilterSpec.standard()


def test_settings_reach_the_specs(tmp_path):
    config = FilterConfig(
        quality={"min_words": 5, "max_words": None},
        repetition={"top_ngram_char_ratios": {"3": 0.5}},
        dedup={"near": False},
        language={"enabled": False},
    )
    spec = filter_spec(config, tmp_path)
    assert spec.quality == QualitySpec(min_words=5, max_words=None)
    assert spec.repetition == RepetitionSpec(top_ngram_char_ratios=((3, 0.5),))
    assert spec.near_dedup is None and spec.exact_dedup is not None
    assert spec.language is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"quality": {"min_words": -1}}, "QualitySpec.min_words"),
        ({"repetition": {"top_ngram_char_ratios": {"x": 0.1}}}, "keyed by n"),
        ({"label_mapping": {"1": "a"}}, "label_field is not"),
        ({"language": {"languages": ["EN"]}}, "did you mean 'en'"),
        ({"dedup": {"num_perm": 100}}, "multiple of"),
    ],
)
def test_a_bad_setting_is_refused_by_its_spec(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        filter_spec(FilterConfig(**config), tmp_path)


@pytest.mark.parametrize(
    ("reason", "setting"),
    [
        ("too_few_tokens", "filtered_documents.config.min_tokens"),
        ("too_many_tokens", "filtered_documents.config.max_tokens"),
        (
            "contaminated",
            "filtered_documents.config.decontaminate (the eval sets, ngram, min_ngram)",
        ),
        ("wrong_language", "filtered_documents.config.language.languages (or enabled: false)"),
        ("low_language_score", "filtered_documents.config.language.min_score (or enabled: false)"),
        ("missing_label", "filtered_documents.config.label_field"),
        ("unmapped_label", "filtered_documents.config.label_mapping"),
        ("flagged_words", "filtered_documents.config.flagged_words (or enabled: false)"),
        ("exact_duplicate", "filtered_documents.config.dedup.exact"),
        ("near_duplicate", "filtered_documents.config.dedup.near"),
        ("dup_5gram_char_ratio", "filtered_documents.config.repetition (or enabled: false)"),
        ("too_few_words", "filtered_documents.config.quality (or enabled: false)"),
        ("too_few_stop_words", "filtered_documents.config.quality (or enabled: false)"),
    ],
)
def test_each_reason_names_the_setting_to_change(reason, setting):
    assert f"filtered_documents.config.{setting_of(reason)}" == setting


def _doc(spec_type: type, name: str) -> str | None:
    return next(f for f in dataclasses.fields(spec_type) if f.name == name).metadata.get("doc")


def test_the_descriptions_are_the_specs():
    fields = FilterConfig.model_fields
    assert fields["min_tokens"].description == _doc(LengthFilterSpec, "min_tokens")
    assert fields["label_field"].description == _doc(LabelSpec, "field")
    dedup = fields["dedup"].annotation.model_fields
    assert dedup["exact"].description == _doc(ExactDedupSpec, "enabled")
    assert dedup["near"].description == _doc(NearDedupSpec, "enabled")
    assert dedup["bands"].description == _doc(NearDedupSpec, "bands")
    decontaminate = fields["decontaminate"].annotation.model_fields
    assert decontaminate["paths"].description == _doc(DecontamSpec, "files")
    assert decontaminate["min_ngram"].description == _doc(DecontamSpec, "min_ngram")
    language = fields["language"].annotation.model_fields
    assert language["enabled"].description == _doc(LanguageSpec, "enabled")


def test_near_dedup_off_leaves_its_other_settings_unchecked(tmp_path):
    spec = filter_spec(FilterConfig(dedup={"near": False, "num_perm": 100}), tmp_path)
    assert spec.near_dedup is None and spec.exact_dedup == ExactDedupSpec()
