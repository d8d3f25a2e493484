"""Exact and near-duplicate detection.

Two halves, so that a million documents fit in bounded memory on any backend:

* Per shard (a worker, :func:`dedup_annotate`): each document gets the SHA-256 of its normalized
  text (``content_hash``; SFT rows include the prompt's fields, see :func:`dedup_texts`), its
  MinHash signature (``minhash``) and one hash per LSH band (``minhash_bands``). Pure functions
  of the text with fixed seeds, so every backend computes the same values.
* Global (the driver, :func:`resolve_duplicates`): DuckDB groups the hashes of every shard, and of
  earlier runs, on disk. Exact duplicates: the first document in stable order keeps its text.
  Near duplicates: each document sharing a band bucket is paired with the bucket's first
  document in stable order, the pair checked against the Jaccard threshold on their full
  signatures; in stable order, a document similar to earlier ones joins the cluster of one of
  them (:func:`attach_in_order`), and the first member of each cluster is kept.

Stable order is (the run that first saw the document, source file, source line): a file added
later is deduplicated against what the warehouse already holds, never the other way round.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from llm_assets.kernels.schema import (
    LEARNED_SPANS,
    PROMPT,
    TEXT,
    StageResult,
    empty_rejects,
    learned_span_arrays,
)
from llm_assets.kernels.words import Words, split_words

CONTENT_HASH = "content_hash"
MINHASH = "minhash"
MINHASH_BANDS = "minhash_bands"
DEDUP_STAGE = "dedup"
EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"

_MASK32 = np.uint64(0xFFFFFFFF)
_MIX = np.uint64(0x9E3779B97F4A7C15)
_SHINGLE_CHUNK = 4_096
"""Shingles per numpy step: bounds the (permutations x shingles) matrix to ~30 MB."""


@dataclass(frozen=True)
class ExactDedupSpec:
    """SHA-256 of the normalized text; the first document in stable order is kept."""

    enabled: bool = field(
        default=True, metadata={"doc": "Drop exact duplicates (SHA-256 of the text)"}
    )


@dataclass(frozen=True)
class NearDedupSpec:
    """MinHash over word n-grams with LSH banding (datatrove's defaults: 5-grams, 14 bands of 8).

    Documents whose estimated Jaccard similarity reaches ``threshold`` join one cluster."""

    enabled: bool = field(default=True, metadata={"doc": "Drop near duplicates (MinHash LSH)"})
    ngram: int = field(default=5, metadata={"doc": "Words per shingle"})
    num_perm: int = field(default=112, metadata={"doc": "MinHash permutations"})
    bands: int = field(default=14, metadata={"doc": "LSH bands (num_perm must be a multiple)"})
    threshold: float = field(
        default=0.8, metadata={"doc": "Estimated Jaccard at which documents cluster"}
    )
    seed: int = 1

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"near-dedup ngram must be >= 1, got {self.ngram}")
        if self.num_perm < 1 or self.bands < 1 or self.num_perm % self.bands:
            raise ValueError(
                f"near-dedup num_perm ({self.num_perm}) must be a positive multiple of "
                f"bands ({self.bands})"
            )
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"near-dedup threshold must be within (0, 1], got {self.threshold}")

    @property
    def rows(self) -> int:
        """Signature values per band."""
        return self.num_perm // self.bands


def _permutations(spec: NearDedupSpec) -> tuple[np.ndarray, np.ndarray]:
    """The ``a`` (odd) and ``b`` of each permutation ``a * h + b mod 2^32`` of the 32-bit shingle
    hashes, drawn from the seed. Odd multipliers make each map a bijection; uint32 arithmetic keeps
    the (permutations x shingles) matrix at half the memory traffic of a 61-bit prime field."""
    rng = np.random.default_rng(spec.seed)
    a = (rng.integers(0, 1 << 32, size=spec.num_perm, dtype=np.uint64) | 1).astype(np.uint32)
    b = rng.integers(0, 1 << 32, size=spec.num_perm, dtype=np.uint64).astype(np.uint32)
    return a, b


def content_hashes(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """SHA-256 (hex) of each text's UTF-8 bytes."""
    return pa.array(
        [hashlib.sha256(t.encode()).hexdigest() for t in texts.to_pylist()], pa.string()
    )


def _lowered_words(
    texts: pa.Array | pa.ChunkedArray, words: Words | None
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The words of the lowercased texts (:func:`split_words`). Given the texts' words, their
    distinct words are lowercased and encoded again instead: lowercasing turns no character into
    whitespace nor whitespace into anything else, so the words are the same (in another
    numbering, which no hash depends on: words are hashed by content)."""
    if words is None:
        return split_words(pc.utf8_lower(texts))
    if words.rows != len(texts):
        raise ValueError(f"words of {words.rows} texts given for {len(texts)} texts")
    lowered = pc.utf8_lower(words.vocab).dictionary_encode()
    ids = lowered.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return words.parents, ids[words.ids], lowered.dictionary


def rolling_ngram_hashes(
    hashes: np.ndarray, lengths: Iterable[int]
) -> Iterator[tuple[int, np.ndarray]]:
    """For each n of ``lengths``, ascending: the 64-bit hash of the n words starting at every
    position of ``hashes`` (one uint64 per word, the texts' words one after another), mixed word
    by word (``h = h * MIX ^ next``), so all lengths cost one pass of the longest. An n-gram
    that runs past the array's end mixes in zeros; the caller drops those that cross the end of
    their text. Each yielded array is new: later lengths do not change it."""
    wanted = sorted(set(lengths))
    if not wanted or wanted[0] < 1:
        raise ValueError(f"n-gram lengths must be at least 1, got {sorted(set(lengths))}")
    total = len(hashes)
    padded = np.concatenate([hashes.astype(np.uint64, copy=False), np.zeros(wanted[-1], np.uint64)])
    mixed = padded[:total].copy()
    with np.errstate(over="ignore"):
        for n in range(1, wanted[-1] + 1):
            if n > 1:
                mixed = (mixed * _MIX) ^ padded[n - 1 : total + n - 1]
            if n in wanted:
                yield n, mixed


def shingle_hashes(
    texts: pa.Array | pa.ChunkedArray, ngram: int, seed: int, words: Words | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """32-bit hashes of every word n-gram of every text, and the index of the text each belongs
    to (ascending). Words are lowercased and split on whitespace; a text shorter than ``ngram``
    words is one shingle of all its words; a text without words has none. Vectorized: each
    distinct word is hashed once per batch, n-gram hashes are mixed from word hashes with numpy.
    ``words``: the texts' words (not lowercased), if already split."""
    parents, ids, vocab = _lowered_words(texts, words)
    counts = np.bincount(parents, minlength=len(texts)).astype(np.int64)
    if len(ids) == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64)
    word_hash = np.array(
        [xxhash.xxh64_intdigest(w.encode(), seed) for w in vocab.to_pylist()], dtype=np.uint64
    )
    hashes = word_hash[ids]
    ends = np.cumsum(counts)
    total = len(ids)
    # The n-gram starting at every word position (positions near a text's end are dropped).
    ((_, mixed),) = rolling_ngram_hashes(hashes, (ngram,))
    positions = np.arange(total)
    full = positions + ngram <= ends[parents]
    shingles, owner = mixed[full], parents[full]
    short = np.flatnonzero((counts > 0) & (counts < ngram))
    if len(short):  # texts with fewer words than the n-gram: one shingle of all their words
        extra = np.zeros(len(short), np.uint64)
        starts = ends[short] - counts[short]
        with np.errstate(over="ignore"):
            for k in range(int(counts[short].max())):
                take = k < counts[short]
                step = (extra * _MIX) ^ hashes[np.where(take, starts + k, 0)]
                extra = np.where(take, step if k else hashes[starts], extra)
        # Those texts have no other shingle: insert theirs where their index falls.
        at = np.searchsorted(owner, short)
        shingles, owner = np.insert(shingles, at, extra), np.insert(owner, at, short)
    folded = ((shingles >> np.uint64(32)) ^ (shingles & _MASK32)).astype(np.uint32)
    return folded, owner


def minhash_signatures(
    texts: pa.Array | pa.ChunkedArray, spec: NearDedupSpec, words: Words | None = None
) -> np.ndarray:
    """MinHash signatures, shape (texts, num_perm), uint32. A text without words gets all-ones
    (``0xFFFFFFFF``). ``words``: the texts' words, if already split."""
    shingles, owner = shingle_hashes(texts, spec.ngram, spec.seed, words)
    a, b = _permutations(spec)
    signatures = np.full((spec.num_perm, len(texts)), 0xFFFFFFFF, dtype=np.uint32)
    buffer = np.empty((spec.num_perm, _SHINGLE_CHUNK), dtype=np.uint32)  # reused: no allocation
    a_column, b_column = a[:, None], b[:, None]
    for lo in range(0, len(shingles), _SHINGLE_CHUNK):
        chunk = shingles[lo : lo + _SHINGLE_CHUNK]
        rows = owner[lo : lo + _SHINGLE_CHUNK]
        permuted = buffer[:, : len(chunk)]
        np.multiply(a_column, chunk[None, :], out=permuted)
        permuted += b_column
        # Shingles of one text are contiguous: reduce each run, then fold into the signature
        # (a text may straddle two chunks).
        bounds = np.flatnonzero(np.diff(rows, prepend=-1))
        mins = np.minimum.reduceat(permuted, bounds, axis=1)
        here = rows[bounds]
        signatures[:, here] = np.minimum(signatures[:, here], mins)
    return np.ascontiguousarray(signatures.T)


def band_hashes(signatures: np.ndarray, spec: NearDedupSpec) -> np.ndarray:
    """One 64-bit hash per LSH band, shape (texts, bands), as int64 (DuckDB-friendly)."""
    n = signatures.shape[0]
    grouped = signatures.astype(np.uint64).reshape(n, spec.bands, spec.rows)
    mixed = np.full((n, spec.bands), np.uint64(spec.seed), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for r in range(spec.rows):
            mixed = (mixed ^ grouped[:, :, r]) * _MIX
            mixed ^= mixed >> np.uint64(29)
        # The band number goes into the hash: equal values in different bands never collide.
        mixed ^= np.arange(spec.bands, dtype=np.uint64)[None, :] * np.uint64(0xBF58476D1CE4E5B9)
    return mixed.view(np.int64)


def dedup_annotate(
    table: pa.Table, exact: ExactDedupSpec, near: NearDedupSpec, words: Words | None = None
) -> StageResult:
    """Kernel (per shard): add ``content_hash`` and, with near-dedup on, ``minhash`` and
    ``minhash_bands`` columns; drops nothing (the global step decides). ``words``: the words of
    ``table[TEXT]``, if already split; unused for SFT rows, whose MinHash covers more than the
    text (:func:`dedup_texts`)."""
    texts = dedup_texts(table)
    if _joins_prompt(table):
        words = None
    if exact.enabled:
        table = table.append_column(pa.field(CONTENT_HASH, pa.string()), content_hashes(texts))
    if near.enabled:
        signatures = minhash_signatures(texts, near, words)
        bands = band_hashes(signatures, near)
        table = table.append_column(
            pa.field(MINHASH, pa.list_(pa.uint32(), near.num_perm)),
            pa.FixedSizeListArray.from_arrays(pa.array(signatures.reshape(-1)), near.num_perm),
        ).append_column(
            pa.field(MINHASH_BANDS, pa.list_(pa.int64(), near.bands)),
            pa.FixedSizeListArray.from_arrays(pa.array(bands.reshape(-1)), near.bands),
        )
    return StageResult(table, empty_rejects())


def dedup_texts(table: pa.Table) -> pa.Array | pa.ChunkedArray:
    """What two documents must share to be duplicates: the text; for SFT rows the rendered
    prompt too (``prompt``), so that equal answers to different instructions are not duplicates,
    while fields the prompt does not use (an ``id``, a timestamp) do not make rows differ; for a
    chat row that learns earlier answers (``chat_answers: all``), which tokens it learns, so that
    a copy of a conversation that learns more of its answers is not dropped for one that learns
    fewer."""
    if not _joins_prompt(table):
        return table[TEXT]
    joined = pc.binary_join_element_wise(table[PROMPT], table[TEXT], "\n")
    if LEARNED_SPANS not in table.column_names:
        return joined
    rows, starts, ends = learned_span_arrays(table[LEARNED_SPANS])
    counts = np.bincount(rows, minlength=table.num_rows)
    if not (counts > 1).any():
        return joined
    first = np.concatenate([[0], np.cumsum(counts)]).tolist()
    starts_list, ends_list = starts.tolist(), ends.tolist()
    learned: list[str | None] = [None] * table.num_rows
    for row in np.flatnonzero(counts > 1).tolist():
        spans = range(first[row], first[row + 1])
        learned[row] = "learned " + " ".join(f"{starts_list[i]}-{ends_list[i]}" for i in spans)
    suffix = pa.array(learned, pa.string())
    return pc.binary_join_element_wise(joined, suffix, "\n", null_handling="skip")


def _joins_prompt(table: pa.Table) -> bool:
    """Whether :func:`dedup_texts` adds the rendered prompt to the text (SFT rows)."""
    return PROMPT in table.column_names


def jaccard_estimate(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Share of equal signature values, row by row (the MinHash estimate of Jaccard similarity)."""
    return (left == right).mean(axis=1)


def attach_in_order(
    later: np.ndarray, earlier: np.ndarray, scores: np.ndarray
) -> dict[int, tuple[int, int, float]]:
    """Near-duplicate clusters from similar pairs of documents, each given by ranks in stable
    order (``later`` > ``earlier``), as ``{member: (root, partner, score)}`` for every document
    that joins a cluster (roots, the kept documents, are not keys).

    Documents are taken in stable order, and each one found similar to earlier documents (the
    pairs given: the global step pairs a document with the first of each band bucket it is in,
    not with every member) joins the cluster of one of them: the cluster whose root is first in
    stable order; within it the partner with the highest score, then the first. Clusters never
    merge, so a document's fate depends only on documents before it. That is what keeps earlier
    output unchanged when files are added (new documents come last): connected components
    (union-find) would let a new document that resembles two documents kept before, each below
    the threshold with the other, join their clusters and drop one of them."""
    joined: dict[int, tuple[int, int, float]] = {}
    order = np.lexsort((earlier, -scores, later))  # by member, best score first, then partner
    for member, rows in itertools.groupby(order.tolist(), key=lambda i: int(later[i])):
        best: tuple[int, int, float] | None = None
        for i in rows:
            partner = int(earlier[i])  # before ``member``: its own entry, if any, is final
            root = joined[partner][0] if partner in joined else partner
            if best is None or root < best[0]:
                best = (root, partner, float(scores[i]))
        assert best is not None
        joined[member] = best
    return joined


# --- global resolution (driver) -------------------------------------------------------------------
SEEN_TABLE = "dedup_seen"
"""Catalog table: every document id the dedup step has seen, with the ordinal of the run that
first saw it, per ``scope`` (the configs and code versions of the filter stage and the stages
before it). It is
what makes "first" stable across runs: a document added later loses to one kept before. Each
config has a history of its own, so a config's output does not depend on which other configs ran
in the warehouse before it. (Rows of catalogs from before the scope have a null scope and are
not used.)"""

DROPS_SCHEMA = pa.schema(
    [
        pa.field("shard", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("value", pa.string()),
    ]
)
"""The documents the global step removes, by shard, with their reason and value."""


@dataclass(frozen=True)
class DedupOutcome:
    """What :func:`resolve_duplicates` found."""

    drops: pa.Table
    exact_removed: int
    near_removed: int
    near_clusters: int
    candidate_pairs: int
    seconds: float
    path: str = ""
    """Where the driver wrote ``drops`` (set by the caller)."""


def _drop_seen_primary_key(con: Any) -> None:
    """Rebuild :data:`SEEN_TABLE` without the primary key on ``doc_id`` that the first releases
    with a dedup history gave it: with one history per scope, one document id has a row per
    scope, which that key refused (every run of such a catalog failed with a constraint error).
    The rows are kept as they are."""
    keyed = con.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? "
        "AND constraint_type = 'PRIMARY KEY' AND schema_name = current_schema()",
        [SEEN_TABLE],
    ).fetchone()[0]
    if not keyed:
        return
    columns = [row[0] for row in con.execute(f"DESCRIBE {SEEN_TABLE}").fetchall()]
    listed = ", ".join(f'"{name}"' for name in columns)
    con.execute(f"CREATE TABLE {SEEN_TABLE}_unkeyed AS SELECT {listed} FROM {SEEN_TABLE}")
    con.execute(f"DROP TABLE {SEEN_TABLE}")
    con.execute(f"ALTER TABLE {SEEN_TABLE}_unkeyed RENAME TO {SEEN_TABLE}")


_SEEN_IN_SCOPE = f"(SELECT doc_id, run FROM {SEEN_TABLE} WHERE scope = $scope)"
"""The history of first sightings of the scope bound to ``$scope``."""


@dataclass(frozen=True)
class _NearDrops:
    """What the near-duplicate phase of :func:`resolve_duplicates` found."""

    drops: pa.Table | None
    root: dict[str, str]
    """Near duplicate -> the kept document of its cluster."""
    removed: int = 0
    clusters: int = 0
    candidate_pairs: int = 0


def resolve_duplicates(
    con: Any,
    shards: list[tuple[str, str]],
    exact: ExactDedupSpec,
    near: NearDedupSpec,
    *,
    scope: str = "",
) -> DedupOutcome:
    """Decide, over every shard at once, which documents are duplicates.

    ``con`` is a writable DuckDB connection to the catalog (``dedup_seen`` lives there);
    ``shards`` are ``(shard key, parquet path)`` of annotated shards; ``scope`` names whose
    history of first sightings to use and extend (:data:`SEEN_TABLE`). Work happens in DuckDB
    (spilling to disk when needed); Python sees only candidate pairs.

    Every document gets its rank in stable order (``ord``) once; "first in stable order" is then
    the smallest ``ord`` of a group, found by hash aggregation on integers instead of a window
    sorted by strings per content hash and per band bucket. Band buckets with one document (nearly
    all of them) drop out of the aggregation, and the signatures of the few documents in candidate
    pairs are read from the shards in one scan."""
    started = time.perf_counter()
    _ensure_seen_table(con)
    paths = [p for _, p in shards]
    _load_documents(con, shards, exact, near)
    _record_first_sightings(con, scope)
    _rank_in_stable_order(con, scope)
    drops: list[pa.Table] = [DROPS_SCHEMA.empty_table()]
    exact_drops = _exact_duplicates(con) if exact.enabled else None
    found = _near_duplicates(con, paths, near) if near.enabled else _NearDrops(None, {})
    if found.drops is not None:
        drops.append(found.drops)
    if exact_drops is not None:
        drops.append(_name_near_clusters(exact_drops, found.root))
    for name in ("dd_files", "dd_docs", "dd_ordered", "dd_pairs"):
        con.execute(f"DROP TABLE IF EXISTS {name}")
    return DedupOutcome(
        drops=pa.concat_tables(drops).sort_by([("shard", "ascending"), ("doc_id", "ascending")]),
        exact_removed=0 if exact_drops is None else exact_drops.num_rows,
        near_removed=found.removed,
        near_clusters=found.clusters,
        candidate_pairs=found.candidate_pairs,
        seconds=time.perf_counter() - started,
    )


def _ensure_seen_table(con: Any) -> None:
    """Create :data:`SEEN_TABLE` if missing, in its current shape.

    No primary key: the anti-join of :func:`_record_first_sightings` keeps ids unique per scope,
    and building the key's index costs more than the rest of a first run's step. (A catalog made
    with the key is rebuilt without it: the key refused a document's row in a second scope.)"""
    con.execute(f"CREATE TABLE IF NOT EXISTS {SEEN_TABLE} (doc_id VARCHAR, run BIGINT)")
    _drop_seen_primary_key(con)
    con.execute(f"ALTER TABLE {SEEN_TABLE} ADD COLUMN IF NOT EXISTS scope VARCHAR")


def _load_documents(
    con: Any, shards: list[tuple[str, str]], exact: ExactDedupSpec, near: NearDedupSpec
) -> None:
    """Read every shard's ids, locations and enabled hashes into the temp table ``dd_docs``
    (``dd_files`` maps each parquet path to its shard key)."""
    # From Arrow in one statement (executemany costs milliseconds a row in DuckDB).
    files = pa.table(
        {"path": [p for _, p in shards], "shard": [s for s, _ in shards]},
        schema=pa.schema([("path", pa.string()), ("shard", pa.string())]),
    )
    con.register("dd_files_arrow", files)
    con.execute("CREATE OR REPLACE TEMP TABLE dd_files AS SELECT * FROM dd_files_arrow")
    con.unregister("dd_files_arrow")
    hash_col = f", {CONTENT_HASH}" if exact.enabled else ""
    band_col = f", {MINHASH_BANDS}" if near.enabled else ""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE dd_docs AS SELECT f.shard, d.doc_id, d.source_file, "
        f"d.source_line{hash_col}{band_col} FROM read_parquet(?, filename = true) d "
        "JOIN dd_files f ON f.path = d.filename",
        [[p for _, p in shards]],
    )


def _record_first_sightings(con: Any, scope: str) -> None:
    """Add the documents of ``dd_docs`` that ``scope`` has not seen, under its next run."""
    next_run = con.execute(
        f"SELECT coalesce(max(run), 0) + 1 FROM {_SEEN_IN_SCOPE}", {"scope": scope}
    ).fetchone()[0]
    con.execute(
        f"INSERT INTO {SEEN_TABLE} (doc_id, run, scope) SELECT DISTINCT doc_id, $run, $scope "
        f"FROM dd_docs WHERE doc_id NOT IN (SELECT doc_id FROM {_SEEN_IN_SCOPE})",
        {"run": next_run, "scope": scope},
    )


def _rank_in_stable_order(con: Any, scope: str) -> None:
    """Replace ``dd_docs`` by ``dd_ordered``: its rows with their rank in stable order (``ord``)
    and the run that first saw them (``seen_run``)."""
    # Rank the narrow (id, location) rows, then join: sorting the wide rows moves every band list.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE dd_ordered AS SELECT r.ord, d.*, r.seen_run FROM dd_docs d "
        "JOIN (SELECT doc_id, s.run AS seen_run, row_number() OVER ("
        "ORDER BY s.run, d.source_file, d.source_line, d.doc_id) AS ord "
        f"FROM (SELECT doc_id, source_file, source_line FROM dd_docs) d JOIN {_SEEN_IN_SCOPE} s "
        "USING (doc_id)) r USING (doc_id)",
        {"scope": scope},
    )
    con.execute("DROP TABLE dd_docs")


def _exact_duplicates(con: Any) -> pa.Table:
    """The exact duplicates in ``dd_ordered`` (a drop row each, plus the ``keeper``'s id), which
    leave it: near-duplicate detection sees only the kept copy."""
    # Groups of one (nearly every document) are dropped by the aggregation itself.
    exact_drops = con.sql(
        "SELECT d.shard, d.doc_id, ? AS reason, 'duplicate of ' || k.doc_id || ' (' || "
        "k.source_file || ':' || k.source_line || ')' AS value, k.doc_id AS keeper FROM ("
        f"SELECT {CONTENT_HASH}, min(ord) AS keep FROM dd_ordered GROUP BY {CONTENT_HASH} "
        f"HAVING count(*) > 1) g JOIN dd_ordered d USING ({CONTENT_HASH}) "
        "JOIN dd_ordered k ON k.ord = g.keep WHERE d.ord <> g.keep ORDER BY d.shard, d.doc_id",
        params=[EXACT_DUPLICATE],
    ).to_arrow_table()
    con.register("dd_exact_drops", exact_drops)
    con.execute("DELETE FROM dd_ordered WHERE doc_id IN (SELECT doc_id FROM dd_exact_drops)")
    con.unregister("dd_exact_drops")
    return exact_drops


def _near_duplicates(con: Any, paths: list[str], near: NearDedupSpec) -> _NearDrops:
    """The near duplicates in ``dd_ordered``: candidate pairs from shared band buckets, checked
    against the threshold on their signatures, joined into clusters in stable order."""
    candidates, pairs = _candidate_pairs(con, paths)
    if not pairs.num_rows:
        return _NearDrops(None, {}, candidate_pairs=0)
    ords = candidates["ord"].to_numpy()
    later, earlier = pairs["ord"].to_numpy(), pairs["rep"].to_numpy()
    signatures = _signature_matrix(candidates[MINHASH], near.num_perm)
    similarity = jaccard_estimate(
        signatures[np.searchsorted(ords, later)], signatures[np.searchsorted(ords, earlier)]
    )
    # Rows of one record (a conversation's answers, chat_answers: every) are never
    # duplicates of each other: each later one's prompt holds the earlier ones.
    files = candidates["source_file"].to_numpy(zero_copy_only=False)
    lines = candidates["source_line"].to_numpy()
    at_later, at_earlier = np.searchsorted(ords, later), np.searchsorted(ords, earlier)
    same_record = (files[at_later] == files[at_earlier]) & (lines[at_later] == lines[at_earlier])
    similar = np.flatnonzero((similarity >= near.threshold) & ~same_record)
    joined = attach_in_order(later[similar], earlier[similar], similarity[similar])
    found = _near_drop_rows(candidates, joined)
    return replace(found, candidate_pairs=pairs.num_rows)


def _candidate_pairs(con: Any, paths: list[str]) -> tuple[pa.Table, pa.Table]:
    """The candidate pairs ``(ord, rep)`` sorted, and their documents with their signatures
    sorted by ``ord`` (one scan of the shards)."""
    # Each band bucket with more than one document: pair every member with the bucket's
    # first member in stable order (a star, not all pairs: linear in the bucket's size).
    con.execute(
        "CREATE OR REPLACE TEMP TABLE dd_pairs AS SELECT DISTINCT ord, rep FROM ("
        "SELECT unnest(members) AS ord, rep FROM ("
        "SELECT list(ord) AS members, min(ord) AS rep FROM ("
        f"SELECT ord, unnest({MINHASH_BANDS}) AS h FROM dd_ordered) "
        "GROUP BY h HAVING count(*) > 1)) WHERE ord <> rep"
    )
    candidates = con.sql(
        "SELECT o.ord, o.doc_id, o.seen_run, o.source_file, o.source_line, o.shard, "
        f"m.{MINHASH} FROM dd_ordered o JOIN (SELECT doc_id, {MINHASH} FROM read_parquet(?)) "
        "m USING (doc_id) WHERE o.ord IN (SELECT ord FROM dd_pairs UNION SELECT rep FROM "
        "dd_pairs) ORDER BY o.ord",
        params=[paths],
    ).to_arrow_table()
    pairs = con.sql("SELECT ord, rep FROM dd_pairs ORDER BY ord, rep").to_arrow_table()
    return candidates, pairs


def _near_drop_rows(candidates: pa.Table, joined: dict[int, tuple[int, int, float]]) -> _NearDrops:
    """A drop row for each document that joined a cluster (:func:`attach_in_order`), naming
    the cluster's kept document, its size and the closest earlier member."""
    ords = candidates["ord"].to_numpy()
    doc_ids = candidates["doc_id"].to_pylist()
    shard_of = candidates["shard"].to_pylist()

    def doc(o: int) -> str:
        return doc_ids[int(np.searchsorted(ords, o))]

    sizes = Counter(root for root, _, _ in joined.values())
    near_root: dict[str, str] = {}
    rows = []
    for member, (root, partner, score) in sorted(joined.items()):
        at = int(np.searchsorted(ords, member))
        near_root[doc_ids[at]] = doc(root)
        value = f"cluster {doc(root)} of {sizes[root] + 1}; jaccard {score:.2f} with {doc(partner)}"
        rows.append((shard_of[at], doc_ids[at], NEAR_DUPLICATE, value))
    drops = None
    if rows:
        columns = [list(c) for c in zip(*rows, strict=True)]
        drops = pa.table(columns, schema=DROPS_SCHEMA)
    return _NearDrops(drops, near_root, removed=len(rows), clusters=len(sizes))


def _name_near_clusters(exact_drops: pa.Table, near_root: dict[str, str]) -> pa.Table:
    """The exact drops in :data:`DROPS_SCHEMA`, without ``keeper``.

    An exact copy of a document that is itself a near duplicate also names that cluster, so
    the drops of one kept document are found by its id (the README's query)."""
    values = [
        f"{value}; {keeper} is a near duplicate in cluster {near_root[keeper]}"
        if keeper in near_root
        else value
        for value, keeper in zip(
            exact_drops["value"].to_pylist(), exact_drops["keeper"].to_pylist(), strict=True
        )
    ]
    exact_drops = exact_drops.drop_columns(["keeper"]).set_column(
        3, "value", pa.array(values, pa.string())
    )
    return exact_drops.cast(DROPS_SCHEMA)


def _signature_matrix(column: pa.ChunkedArray, num_perm: int) -> np.ndarray:
    flat = pa.concat_arrays([c.flatten() for c in column.chunks]) if column.num_chunks else []
    return np.asarray(flat, dtype=np.uint32).reshape(-1, num_perm)
