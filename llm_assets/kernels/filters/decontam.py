"""Decontamination as a step of the chain: the documents sharing a word n-gram with an eval set
are rejected (the kernel: :mod:`llm_assets.kernels.decontam`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from llm_assets.kernels.decontam import CONTAMINATED, DecontamSpec, EvalSetError, check_eval_sets
from llm_assets.kernels.decontam import decontam_filter as decontam_kernel
from llm_assets.kernels.filters.base import Build, Filter, Inputs, SharedWords
from llm_assets.kernels.ingest.formats import detect_format
from llm_assets.kernels.schema import PROMPT, StageResult
from llm_assets.kernels.settings import Form


class DecontamFilter(Filter):
    """``decontaminate``: on when it names eval sets (``paths``)."""

    name = "decontam"
    config_key = "decontaminate"
    spec_type = DecontamSpec
    reasons = (CONTAMINATED,)
    hint = "decontaminate (the eval sets, ngram, min_ngram)"
    switch = False
    keys: ClassVar[Mapping[str, str]] = {"files": "paths"}
    exclude = ("normalize",)
    forms: ClassVar[Mapping[str, Form]] = {"files": Form(type=list[str], default=[])}

    @classmethod
    def from_config(cls, config: Any, build: Build, inputs: Inputs) -> dict[str, Any]:
        """The eval sets (None: no paths, off). Each path is a file or a folder (its input
        files, as ``raw_documents`` lists them), wherever it is; the files are read here,
        so an unreadable record or a missing field fails the run's first step, named (cached:
        later steps do not read them again)."""
        if not config.paths:
            return {cls.name: None}
        files: list[tuple[str, str]] = []
        for given in config.paths:
            path = inputs.resolve(given, "decontaminate.paths")
            if path.is_dir():
                try:
                    found = inputs.input_files(path)
                except ValueError as exc:
                    raise ValueError(f"decontaminate.paths {given!r}: {exc}") from exc
                files += [(str(f.resolve()), f"{given.rstrip('/')}/{rel}") for f, rel in found]
            elif path.is_file():
                try:
                    detect_format(str(path))
                except ValueError as exc:
                    raise ValueError(f"decontaminate.paths {given!r}: {exc}") from exc
                files.append((str(path), given))
            else:
                raise ValueError(f"decontaminate.paths {given!r}: no such file or folder")
        spec = build(config, files=tuple(dict.fromkeys(files)))
        try:
            check_eval_sets(spec)
        except EvalSetError as exc:
            raise ValueError(f"decontaminate: {exc}") from exc
        return {cls.name: spec}

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        shared = None if PROMPT in table.column_names else words(table)
        return decontam_kernel(table, self.spec, shared)
