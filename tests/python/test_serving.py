"""The serving forms through the Python module, on the CPU, against the float64 oracle
(reference.ragged_attention / paged_attention / attention_with_lse): ragged batches, paged KV
caches, the lse output of every form, merge_states, their plans and their errors; numpy
arrays, and torch CPU tensors where PyTorch is importable."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np
import pytest

import heed
import reference
from conftest import in_layout, numpy_dtype, random, torch_or_skip

I32 = np.int32


def cu_seqlens(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(I32)


def assert_both(out, lse, expected: Tuple[np.ndarray, np.ndarray], dtype: str) -> None:
    reference.assert_close(np.asarray(out).astype(np.float64), expected[0], dtype)
    reference.assert_lse_close(lse, expected[1], dtype)


# --- ragged batches ---


@dataclasses.dataclass(frozen=True)
class RaggedCase:
    name: str
    seqs: Tuple[Tuple[int, int], ...]  # (Lq_b, Lk_b) per sequence
    q_heads: int
    kv_heads: int
    head_dim: int = 32
    value_dim: int = -1
    dtype: str = "float32"
    causal: bool = False
    window: Optional[int] = None
    sinks: bool = False
    softcap: Optional[float] = None
    stddev: float = 1.0
    layout: str = "contiguous"  # q, k, v and out: conftest.in_layout's contiguous, padded, strided_last
    no_key_rows: bool = False  # some rows see no key (zeros; lse -inf, or the sink)

    def __str__(self) -> str:
        return self.name


# Empty and length-1 sequences, Lq_b > Lk_b causal rows, sequences with no keys.
MIXED = ((3, 5), (0, 4), (1, 1), (7, 7), (6, 2), (2, 0), (4, 9))

RAGGED_CASES = [
    RaggedCase("mixed_causal", MIXED, 4, 2, causal=True, no_key_rows=True),
    RaggedCase("mixed_full", MIXED, 4, 2, no_key_rows=True),
    RaggedCase("mixed_causal_f16", MIXED, 4, 2, dtype="float16", causal=True, no_key_rows=True),
    RaggedCase("mixed_causal_bf16", MIXED, 4, 2, dtype="bfloat16", causal=True, no_key_rows=True),
    RaggedCase("prefill_long", ((70, 150), (129, 129), (1, 300), (17, 40)), 4, 4, 64, causal=True),
    RaggedCase("prefill_gqa_f16", ((33, 65), (65, 33), (1, 1)), 8, 2, 64, dtype="float16", causal=True,
               no_key_rows=True),
    RaggedCase("prefill_bf16_d128", ((40, 100), (7, 7)), 4, 1, 128, dtype="bfloat16", causal=True),
    RaggedCase("decode_gqa_bf16", ((1, 100), (1, 37), (1, 1), (1, 513)), 32, 8, 128, dtype="bfloat16"),
    RaggedCase("window", ((40, 100), (33, 33), (5, 2), (1, 60)), 4, 2, causal=True, window=8, no_key_rows=True),
    RaggedCase("window1_f16", ((9, 12), (3, 3)), 2, 2, dtype="float16", causal=True, window=1),
    RaggedCase("sinks_mqa", ((5, 20), (0, 3), (4, 0), (3, 3), (30, 90)), 8, 1, sinks=True, no_key_rows=True),
    RaggedCase("sinks_causal_bf16", ((6, 3), (20, 50)), 4, 2, dtype="bfloat16", causal=True, sinks=True,
               no_key_rows=True),
    RaggedCase("softcap_gqa", ((20, 60), (1, 1), (16, 16)), 8, 2, causal=True, softcap=30.0, stddev=3.0),
    RaggedCase("softcap_sinks_window_f16", ((24, 80), (2, 9)), 4, 2, dtype="float16", causal=True, window=16,
               sinks=True, softcap=20.0, stddev=2.0),
    RaggedCase("d96_dv64", ((13, 29), (5, 1)), 2, 1, 96, 64, causal=True),
    RaggedCase("d80_dv112_full", ((11, 31), (0, 0), (8, 3)), 2, 2, 80, 112),
    RaggedCase("padded_layout", MIXED, 4, 2, causal=True, layout="padded", no_key_rows=True),
    RaggedCase("strided_last_bf16", ((9, 19), (4, 4)), 4, 2, dtype="bfloat16", layout="strided_last"),
    RaggedCase("one_sequence", ((37, 37),), 2, 2, causal=True),
    RaggedCase("no_sequences", (), 2, 1),
]


def ragged_inputs(case: RaggedCase, seed: int = 0):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k) as numpy, the call's keyword arguments and the oracle's (out, lse)."""
    rng = np.random.default_rng(seed)
    dtype = numpy_dtype(case.dtype)
    value_dim = case.value_dim if case.value_dim >= 0 else case.head_dim
    total_q = sum(s[0] for s in case.seqs)
    total_k = sum(s[1] for s in case.seqs)
    q = random(rng, (total_q, case.q_heads, case.head_dim), dtype, case.stddev)
    k = random(rng, (total_k, case.kv_heads, case.head_dim), dtype, case.stddev)
    v = random(rng, (total_k, case.kv_heads, value_dim), dtype)
    cu_q, cu_k = cu_seqlens([s[0] for s in case.seqs]), cu_seqlens([s[1] for s in case.seqs])
    sinks = random(rng, (case.q_heads,), dtype) if case.sinks else None
    kwargs = dict(causal=case.causal, window=case.window, sinks=sinks, softcap=case.softcap)
    expected = reference.ragged_attention(q, k, v, cu_q, cu_k, 1 / math.sqrt(case.head_dim), **kwargs)
    if case.no_key_rows:
        assert (expected[0] == 0).all(axis=-1).any(), f"{case.name}: no row sees no key"
    arrays = tuple(in_layout(x, case.layout) for x in (q, k, v)) + (cu_q, cu_k)
    return arrays, kwargs, expected


@pytest.mark.parametrize("case", RAGGED_CASES, ids=str)
def test_ragged_against_oracle(case: RaggedCase):
    (q, k, v, cu_q, cu_k), kwargs, expected = ragged_inputs(case)
    out = in_layout(np.full(expected[0].shape, np.nan, dtype=q.dtype), case.layout)
    result, lse = heed.attention_varlen(q, k, v, cu_q, cu_k, out=out, return_lse=True, **kwargs)
    assert result is out and type(lse) is np.ndarray and lse.dtype == np.float32
    assert_both(result, lse, expected, case.dtype)
    if case.no_key_rows:
        empty = (expected[0] == 0).all(axis=-1)
        assert (result[empty] == 0).all()
        if not case.sinks:
            assert np.isneginf(lse[empty]).all()


@pytest.mark.parametrize("case", RAGGED_CASES[::3], ids=str)
def test_ragged_new_output_and_bounds(case: RaggedCase):
    """Without out: a new contiguous numpy array of q's dtype, equal to the result given
    max_seqlen_* bounds above the longest sequences (the bounds size the plan, not the result)."""
    (q, k, v, cu_q, cu_k), kwargs, expected = ragged_inputs(case)
    result = heed.attention_varlen(q, k, v, cu_q, cu_k, **kwargs)
    assert type(result) is np.ndarray and result.dtype == q.dtype and result.flags.c_contiguous
    reference.assert_close(result.astype(np.float64), expected[0], case.dtype)
    longest_q = max((s[0] for s in case.seqs), default=0)
    longest_k = max((s[1] for s in case.seqs), default=0)
    bounded = heed.attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=longest_q + 5, max_seqlen_k=longest_k + 300,
                                    **kwargs)
    reference.assert_close(bounded.astype(np.float64), expected[0], case.dtype)


def test_ragged_matches_dense_calls():
    """Each sequence of a ragged batch gives what the dense call on it alone gives."""
    case = next(c for c in RAGGED_CASES if c.name == "prefill_long")
    (q, k, v, cu_q, cu_k), kwargs, _ = ragged_inputs(case)
    ragged, ragged_lse = heed.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **kwargs)
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        dense, dense_lse = heed.attention(*(x[None].transpose(0, 2, 1, 3) for x in (q[rows], k[keys], v[keys])),
                                          return_lse=True, **kwargs)
        np.testing.assert_allclose(ragged[rows], dense[0].transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ragged_lse[rows], dense_lse[0].T, rtol=1e-5, atol=1e-5)


# --- paged KV caches ---


@dataclasses.dataclass(frozen=True)
class PagedCase:
    name: str
    kv_lens: Tuple[int, ...]
    page_size: int
    q_heads: int = 4
    kv_heads: int = 2
    q_lens: Optional[Tuple[int, ...]] = None  # None: decode, one query per sequence
    head_dim: int = 64
    dtype: str = "float32"
    causal: bool = False
    window: Optional[int] = None
    sinks: bool = False
    softcap: Optional[float] = None
    table: str = "ordered"  # ordered, shuffled, shared (sequence 1 reads sequence 0's first pages)
    cache: str = "token_major"  # token_major [pages, page_size, H, D]; head_major [pages, H, page_size, D] permuted
    pad: int = 0  # block-table padding past a sequence's pages

    def __str__(self) -> str:
        return self.name


PAGED_CASES = [
    PagedCase("decode_page1", (1, 17, 40, 0), 1),
    PagedCase("decode_page16_shuffled", (1, 17, 300, 0, 16), 16, 8, 2, table="shuffled", pad=-1),
    PagedCase("decode_page64_f16", (64, 65, 200), 64, 8, 1, dtype="float16", table="shuffled"),
    PagedCase("decode_page256_bf16", (700, 1, 256), 256, 32, 8, head_dim=128, dtype="bfloat16"),
    PagedCase("decode_shared_head_major", (90, 120, 33), 16, table="shared", cache="head_major"),
    PagedCase("decode_window_sinks_mqa", (100, 5, 0), 16, 8, 1, causal=True, window=20, sinks=True),
    PagedCase("decode_softcap_bf16", (77, 300), 64, dtype="bfloat16", softcap=30.0, table="shuffled"),
    PagedCase("chunked_prefill", (40, 1, 300, 17), 16, q_lens=(5, 1, 16, 0), causal=True, table="shuffled"),
    PagedCase("chunked_prefill_page1_f16", (9, 30), 1, q_lens=(9, 4), dtype="float16", causal=True),
    PagedCase("chunked_lq_gt_lk", (2, 20), 16, q_lens=(5, 20), causal=True),
    PagedCase("chunked_head_major_bf16", (130, 150), 64, 8, 2, q_lens=(33, 2), dtype="bfloat16", causal=True,
              cache="head_major", table="shared"),
    PagedCase("chunked_window_sinks_softcap", (200, 50), 16, q_lens=(12, 50), causal=True, window=32, sinks=True,
              softcap=25.0, table="shuffled", pad=3),
    PagedCase("chunked_page256_noncausal", (600, 3), 256, 2, 2, q_lens=(7, 3), head_dim=32),
    PagedCase("no_sequences", (), 16),
]


def paged_inputs(case: PagedCase, seed: int = 0, unused: float = 0.0):
    """(q, k_cache, v_cache, block_table, seqlens_k), the call's keyword arguments (with
    cu_seqlens_q) and the oracle's (out, lse). Cache slots no sequence reads hold random values,
    or `unused` where it is NaN."""
    rng = np.random.default_rng(seed)
    dtype = numpy_dtype(case.dtype)
    page_size, batch = case.page_size, len(case.kv_lens)
    needed = [-(-n // page_size) for n in case.kv_lens]
    shared = 0
    if case.table == "shared":
        shared = min(needed[0], needed[1]) - 1 if batch > 1 else 0
        assert shared > 0, case.name
    num_pages = sum(needed) - shared + 3  # three pages no sequence reads
    order = rng.permutation(num_pages) if case.table == "shuffled" else np.arange(num_pages)
    max_pages = max(needed, default=0) + case.pad if case.pad >= 0 else max(needed, default=0) + 2
    table = np.zeros((batch, max_pages), I32)
    next_page = 0
    for b in range(batch):
        if b == 1 and shared:
            table[1, :shared] = table[0, :shared]  # the prefix pages sequence 0 wrote
        for j in range(shared if b == 1 else 0, needed[b]):
            table[b, j] = order[next_page]
            next_page += 1
        # Entries past a sequence's pages are never read: -1 or a valid page.
        table[b, needed[b]:] = -1 if case.pad < 0 else order[-1]
    shape = (num_pages, page_size, case.kv_heads)
    storage_shape = (num_pages, case.kv_heads, page_size) if case.cache == "head_major" else shape
    caches = []
    for _ in range(2):
        storage = random(rng, storage_shape + (case.head_dim,), dtype)
        cache = storage.transpose(0, 2, 1, 3) if case.cache == "head_major" else storage
        if np.isnan(unused):
            read = np.zeros(shape[:2], bool)
            for b, n in enumerate(case.kv_lens):
                j = np.arange(n)
                read[table[b, j // page_size], j % page_size] = True
            cache[~read] = np.nan
        caches.append(cache)
    k_cache, v_cache = caches
    seqlens_k = np.array(case.kv_lens, I32)
    cu_q = None if case.q_lens is None else cu_seqlens(case.q_lens)
    rows = batch if case.q_lens is None else sum(case.q_lens)
    q = random(rng, (rows, case.q_heads, case.head_dim), dtype)
    sinks = random(rng, (case.q_heads,), dtype) if case.sinks else None
    kwargs = dict(causal=case.causal, window=case.window, sinks=sinks, softcap=case.softcap)
    expected = reference.paged_attention(q, k_cache, v_cache, table, seqlens_k, 1 / math.sqrt(case.head_dim),
                                         cu_seqlens_q=cu_q, **kwargs)
    return (q, k_cache, v_cache, table, seqlens_k), dict(kwargs, cu_seqlens_q=cu_q), expected


@pytest.mark.parametrize("case", PAGED_CASES, ids=str)
def test_paged_against_oracle(case: PagedCase):
    (q, k_cache, v_cache, table, seqlens_k), kwargs, expected = paged_inputs(case)
    out = np.full(expected[0].shape, np.nan, dtype=q.dtype)
    result, lse = heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, out=out, return_lse=True, **kwargs)
    assert result is out and lse.dtype == np.float32 and lse.shape == q.shape[:2]
    assert_both(result, lse, expected, case.dtype)
    seen = heed._heed.last_call()
    assert (seen["k"], seen["v"]) == (k_cache.__array_interface__["data"][0], v_cache.__array_interface__["data"][0])
    plain = heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, **kwargs)
    np.testing.assert_array_equal(plain, result)


@pytest.mark.parametrize("case", [c for c in PAGED_CASES if c.kv_lens][::2], ids=str)
def test_paged_never_reads_unused_slots(case: PagedCase):
    """Cache rows past a sequence's length and pages no sequence names hold NaN: none reaches the result."""
    (q, k_cache, v_cache, table, seqlens_k), kwargs, expected = paged_inputs(case, seed=1, unused=np.nan)
    result, lse = heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, return_lse=True, **kwargs)
    assert_both(result, lse, expected, case.dtype)


def test_paged_matches_ragged():
    """A paged cache and the same keys laid out ragged give the same result."""
    case = next(c for c in PAGED_CASES if c.name == "chunked_prefill")
    (q, k_cache, v_cache, table, seqlens_k), kwargs, _ = paged_inputs(case)
    paged, paged_lse = heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, return_lse=True, **kwargs)
    page_size = case.page_size
    keys = [np.arange(n) for n in case.kv_lens]
    k = np.concatenate([k_cache[table[b, j // page_size], j % page_size] for b, j in enumerate(keys)])
    v = np.concatenate([v_cache[table[b, j // page_size], j % page_size] for b, j in enumerate(keys)])
    cu_q = kwargs.pop("cu_seqlens_q")
    ragged, ragged_lse = heed.attention_varlen(q, k, v, cu_q, cu_seqlens(case.kv_lens), return_lse=True, **kwargs)
    np.testing.assert_allclose(paged, ragged, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(paged_lse, ragged_lse, rtol=1e-5, atol=1e-5)


# --- lse on the dense call ---


DENSE_LSE_CASES = [
    # (name, q shape, kv shape, dtype, options)
    ("prefill_causal", (2, 4, 33, 64), (2, 2, 70, 64), "float32", dict(causal=True)),
    ("lq_gt_lk", (1, 2, 30, 32), (1, 2, 20, 32), "float32", dict(causal=True)),
    ("decode_sinks_bf16", (2, 8, 1, 128), (2, 2, 300, 128), "bfloat16", dict(sinks=True)),
    ("window_softcap_f16", (1, 4, 40, 64), (1, 1, 130, 64), "float16", dict(causal=True, window=9, softcap=30.0)),
    ("mask_rows_sinks", (1, 2, 20, 32), (1, 2, 40, 32), "float32", dict(mask=True, sinks=True)),
    ("mask_rows_bf16", (1, 2, 20, 32), (1, 2, 40, 32), "bfloat16", dict(mask=True)),
    ("tiled_long", (1, 2, 200, 64), (1, 2, 333, 64), "float32", dict(causal=True)),
    ("no_keys", (1, 2, 5, 16), (1, 1, 0, 16), "float32", dict()),
]


@pytest.mark.parametrize("name,q_shape,kv_shape,dtype_name,options", DENSE_LSE_CASES,
                         ids=[c[0] for c in DENSE_LSE_CASES])
def test_dense_return_lse(name, q_shape, kv_shape, dtype_name, options):
    rng = np.random.default_rng(3)
    dtype = numpy_dtype(dtype_name)
    q, k, v = random(rng, q_shape, dtype), random(rng, kv_shape, dtype), random(rng, kv_shape, dtype)
    kwargs = dict(options)
    if kwargs.pop("sinks", False):
        kwargs["sinks"] = random(rng, (q_shape[1],), dtype)
    if kwargs.pop("mask", False):
        mask = rng.random((q_shape[2], kv_shape[2])) < 0.6
        mask[:3] = False  # rows that see no key
        kwargs["mask"] = mask
    expected = reference.attention_with_lse(q, k, v, 1 / math.sqrt(q_shape[3]), **kwargs)
    out, lse = heed.attention(q, k, v, return_lse=True, **kwargs)
    assert lse.shape == q_shape[:3] and lse.dtype == np.float32
    assert_both(out, lse, expected, dtype_name)
    np.testing.assert_array_equal(out, heed.attention(q, k, v, **kwargs))  # lse changes nothing in out
    strided_lse_out = in_layout(np.full(q_shape[:3] + (kv_shape[3],), np.nan, dtype), "blhd")
    result, lse_again = heed.attention(q, k, v, out=strided_lse_out, return_lse=True, **kwargs)
    assert result is strided_lse_out
    np.testing.assert_array_equal(lse_again, lse)


def test_lse_identity():
    """out · exp(lse) = sum_j exp(s_j) · v_j, in float64 from the oracle's scores."""
    rng = np.random.default_rng(4)
    q, k, v = random(rng, (1, 2, 6, 16), np.float32), random(rng, (1, 2, 9, 16), np.float32), random(
        rng, (1, 2, 9, 8), np.float32)
    out, lse = heed.attention(q, k, v, causal=True, return_lse=True)
    scores = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / 4
    scores = np.where(np.arange(9)[None, :] <= np.arange(6)[:, None] + 3, scores, -np.inf)
    np.testing.assert_allclose(out * np.exp(lse.astype(np.float64))[..., None],
                               np.einsum("bhij,bhjd->bhid", np.exp(scores), v), rtol=1e-4)


# --- merge_states ---


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_merge_two_halves_of_the_keys(dtype_name):
    """A call over keys [0, s) with the sinks and one over [s, Lk) without merge into the whole call."""
    rng = np.random.default_rng(5)
    dtype = numpy_dtype(dtype_name)
    q, k, v = random(rng, (2, 8, 9, 64), dtype), random(rng, (2, 2, 150, 64), dtype), random(rng, (2, 2, 150, 48), dtype)
    sinks = random(rng, (8,), dtype)
    whole = reference.attention_with_lse(q, k, v, 1 / 8, sinks=sinks)
    a = heed.attention(q, k[:, :, :61], v[:, :, :61], sinks=sinks, return_lse=True)
    b = heed.attention(q, k[:, :, 61:], v[:, :, 61:], return_lse=True)
    out, lse = heed.merge_states(*a, *b)
    assert out.dtype == dtype and lse.dtype == np.float32 and out.shape == a[0].shape and lse.shape == a[1].shape
    assert_both(out, lse, whole, dtype_name)
    in_place = a[0].copy()
    result, lse_again = heed.merge_states(in_place, a[1], *b, out=in_place)
    assert result is in_place
    np.testing.assert_array_equal(result, out)
    np.testing.assert_array_equal(lse_again, lse)


def test_merge_paged_prefix_and_suffix():
    """Decode over a shared prefix's pages and each sequence's own suffix pages, merged, is decode
    over the whole sequence."""
    case = PagedCase("merge", (96, 130, 50), 16, 8, 2, sinks=True, table="shuffled")
    (q, k_cache, v_cache, table, seqlens_k), kwargs, expected = paged_inputs(case)
    kwargs.pop("cu_seqlens_q")
    sinks = kwargs.pop("sinks")
    prefix = np.minimum(seqlens_k, 48)  # three pages each
    a = heed.attention_paged(q, k_cache, v_cache, table, prefix, sinks=sinks, return_lse=True)
    b = heed.attention_paged(q, k_cache, v_cache, np.ascontiguousarray(table[:, 3:]), seqlens_k - prefix,
                             return_lse=True)
    assert_both(*heed.merge_states(*a, *b), expected, "float32")


def test_merge_empty_parts():
    """A part with lse -inf adds nothing, even where its values are NaN; two empty parts give zeros, -inf."""
    rng = np.random.default_rng(6)
    out_a = random(rng, (3, 4, 16), np.float32)
    lse_a = random(rng, (3, 4), np.float32)
    lse_a[0] = -np.inf
    out_a[0] = np.nan
    out_b = random(rng, (3, 4, 16), np.float32)
    lse_b = random(rng, (3, 4), np.float32)
    lse_b[0, :2] = -np.inf
    out, lse = heed.merge_states(out_a, lse_a, out_b, lse_b)
    assert (out[0, :2] == 0).all() and np.isneginf(lse[0, :2]).all()
    np.testing.assert_allclose(out[0, 2:], out_b[0, 2:], rtol=1e-6)
    np.testing.assert_allclose(lse[0, 2:], lse_b[0, 2:], rtol=1e-6)
    expected_lse = np.logaddexp(lse_a[1:].astype(np.float64), lse_b[1:])
    np.testing.assert_allclose(lse[1:], expected_lse, rtol=1e-6)
    weight_a = np.exp(lse_a[1:] - expected_lse)[..., None]
    np.testing.assert_allclose(out[1:], weight_a * out_a[1:] + (1 - weight_a) * out_b[1:], rtol=1e-5, atol=1e-6)


# --- plans and workspaces ---


def test_serving_plans_name_the_kernel_that_runs():
    heed.profile.set_mode("shapes")
    try:
        for case in RAGGED_CASES[:8]:
            (q, k, v, cu_q, cu_k), kwargs, _ = ragged_inputs(case)
            plan = heed.plan_varlen(q, k, v, cu_q, cu_k, **kwargs)
            heed.profile.reset()
            heed.attention_varlen(q, k, v, cu_q, cu_k, **kwargs)
            names = [key.split(" ")[0] for key, _ in heed.profile.entries()]
            assert plan.kernel_name in names, f"{case.name}: plan {plan.kernel_name}, ran {names}"
            assert "ragged" in plan.explain()
        for case in PAGED_CASES[:-1]:
            (q, k_cache, v_cache, table, seqlens_k), kwargs, _ = paged_inputs(case)
            plan = heed.plan_paged(q, k_cache, v_cache, table, seqlens_k, **kwargs)
            heed.profile.reset()
            heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, **kwargs)
            names = [key.split(" ")[0] for key, _ in heed.profile.entries()]
            assert plan.kernel_name in names, f"{case.name}: plan {plan.kernel_name}, ran {names}"
            assert "paged" in plan.explain()
    finally:
        heed.profile.set_mode("off")
        heed.profile.reset()


def test_serving_workspace():
    """A workspace of the plan's scratch_bytes serves the call with no allocation; less is refused."""
    case = next(c for c in RAGGED_CASES if c.name == "prefill_long")
    (q, k, v, cu_q, cu_k), kwargs, expected = ragged_inputs(case)
    plan = heed.plan_varlen(q, k, v, cu_q, cu_k, **kwargs)
    assert plan.scratch_bytes > 0
    workspace = np.empty(plan.scratch_bytes, np.uint8)
    heed.reset_peak()
    before = heed.memory_stats()
    out = heed.attention_varlen(q, k, v, cu_q, cu_k, workspace=workspace, **kwargs)
    assert heed.memory_stats().peak == before.active
    reference.assert_close(out.astype(np.float64), expected[0], "float32")
    with pytest.raises(ValueError, match="workspace"):
        heed.attention_varlen(q, k, v, cu_q, cu_k, workspace=workspace[:plan.scratch_bytes // 2], **kwargs)


ROUTE_RAGGED = ["mixed_causal", "mixed_causal_bf16", "prefill_gqa_f16", "window", "sinks_mqa", "softcap_gqa"]
ROUTE_PAGED = ["decode_page1", "decode_page64_f16", "decode_shared_head_major", "chunked_prefill",
               "chunked_window_sinks_softcap"]


@pytest.mark.parametrize("route", ["vector", "tiled", "composed"])
def test_forced_routes(route):
    """Each route serves the ragged form; paged caches take vector and tiled, and composed names why not."""
    for case in (c for c in RAGGED_CASES if c.name in ROUTE_RAGGED):
        (q, k, v, cu_q, cu_k), kwargs, expected = ragged_inputs(case)
        assert_both(*heed.attention_varlen(q, k, v, cu_q, cu_k, route=route, return_lse=True, **kwargs), expected,
                    case.dtype)
        assert heed.plan_varlen(q, k, v, cu_q, cu_k, route=route, **kwargs).route.startswith(route)
    for case in (c for c in PAGED_CASES if c.name in ROUTE_PAGED):
        (q, k_cache, v_cache, table, seqlens_k), kwargs, expected = paged_inputs(case)
        if route == "composed":
            check(lambda: heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, route=route, **kwargs),
                  NotImplementedError, "a paged cache is not")
            continue
        assert_both(*heed.attention_paged(q, k_cache, v_cache, table, seqlens_k, route=route, return_lse=True,
                                          **kwargs), expected, case.dtype)


def test_smallest_scratch_budget_serves_the_call():
    """Below the smallest budget the error names it; at that budget the call runs within it."""
    for name in ("prefill_long", "decode_gqa_bf16"):
        case = next(c for c in RAGGED_CASES if c.name == name)
        (q, k, v, cu_q, cu_k), kwargs, expected = ragged_inputs(case)
        message = check(lambda: heed.attention_varlen(q, k, v, cu_q, cu_k, max_scratch_bytes=1, **kwargs), ValueError,
                        "the smallest budget that fits is ")
        budget = int(message.split("the smallest budget that fits is ")[1].split()[0])
        plan = heed.plan_varlen(q, k, v, cu_q, cu_k, max_scratch_bytes=budget, **kwargs)
        assert plan.scratch_bytes <= budget
        assert_both(*heed.attention_varlen(q, k, v, cu_q, cu_k, max_scratch_bytes=budget, return_lse=True, **kwargs),
                    expected, case.dtype)


# --- errors ---

RNG = np.random.default_rng(7)
Q, K, V = (random(RNG, shape, np.float32) for shape in ((7, 4, 16), (9, 2, 16), (9, 2, 16)))
CU_Q, CU_K = np.array([0, 3, 7], I32), np.array([0, 5, 9], I32)
KC = random(RNG, (4, 16, 2, 16), np.float32)
TABLE, LENS = np.array([[0, 1], [2, 3]], I32), np.array([20, 5], I32)
QD = Q[:2]
DQ, DK, DV = (x[None].transpose(0, 2, 1, 3) for x in (Q, K, V))  # dense [1, H, L, D]
OUT_A, LSE_A = random(RNG, (2, 4, 16), np.float32), random(RNG, (2, 4), np.float32)


def varlen(**changes):
    args = dict(q=Q, k=K, v=V, cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K)
    options = {name: changes.pop(name) for name in list(changes) if name not in args}
    args.update(changes)
    return lambda: heed.attention_varlen(*args.values(), **options)


def paged(**changes):
    args = dict(q=QD, k_cache=KC, v_cache=KC, block_table=TABLE, seqlens_k=LENS)
    options = {name: changes.pop(name) for name in list(changes) if name not in args}
    args.update(changes)
    return lambda: heed.attention_paged(*args.values(), **options)


VALUE_ERRORS = [
    ("cu_int64", varlen(cu_seqlens_q=CU_Q.astype(np.int64)), "cu_seqlens_q has dtype int64; heed takes int32"),
    ("cu_float", varlen(cu_seqlens_k=CU_K.astype(np.float32)), "cu_seqlens_k has dtype float32"),
    ("cu_first", varlen(cu_seqlens_q=np.array([1, 3, 7], I32)), "cu_seqlens_q[0] must be 0, got 1"),
    ("cu_decreasing", varlen(cu_seqlens_k=np.array([0, 5, 4, 9], I32), cu_seqlens_q=np.array([0, 3, 5, 7], I32)),
     "cu_seqlens_k[2] = 4 < cu_seqlens_k[1] = 5"),
    ("cu_total", varlen(cu_seqlens_k=np.array([0, 5, 8], I32)), "cu_seqlens_k[2] = 8 must equal the tensor's 9 rows"),
    ("cu_lengths_differ", varlen(cu_seqlens_k=np.array([0, 2, 5, 9], I32)), "cu_seqlens_k must have shape [3]"),
    ("cu_empty", varlen(cu_seqlens_q=np.zeros(0, I32)), "cu_seqlens_q must have shape [B + 1]"),
    ("max_seqlen_below", varlen(max_seqlen_q=2), "max_seqlen_q (2) is below the longest sequence's 4 queries"),
    ("max_seqlen_negative", varlen(max_seqlen_k=-1), "max_seqlen_k must be >= 0, got -1"),
    ("varlen_rank", varlen(q=Q[None]), "q must have rank 3"),
    ("varlen_heads", varlen(q=Q[:, :3]), "Hq (3) must be a multiple of Hkv (2)"),
    ("varlen_window", varlen(window=3), "window (3) requires causal"),
    ("varlen_sinks", varlen(sinks=np.zeros(2, np.float32)), "sinks must have shape [Hq] = [4]"),
    ("varlen_out_shape", varlen(out=np.empty((7, 4, 8), np.float32)), "out shape [7, 4, 8] must be [7, 4, 16]"),
    ("varlen_out_is_q", varlen(out=Q), "out overlaps q"),
    ("varlen_route", varlen(route="fast"), "route must be"),
    ("table_entry", paged(block_table=np.array([[0, 1], [9, 3]], I32)),
     "block_table[1, 0] = 9 is outside [0, num_pages = 4)"),
    ("table_negative", paged(block_table=np.array([[0, -1], [2, 3]], I32)), "block_table[0, 1] = -1 is outside"),
    ("seqlens_capacity", paged(seqlens_k=np.array([40, 5], I32)),
     "seqlens_k[0] = 40 exceeds max_pages * page_size = 2 * 16 = 32"),
    ("seqlens_negative", paged(seqlens_k=np.array([3, -2], I32)), "seqlens_k[1] = -2 is negative"),
    ("seqlens_shape", paged(seqlens_k=np.array([3], I32)), "seqlens_k must have shape [2]"),
    ("table_rank", paged(block_table=TABLE[0]), "block_table must have rank 2"),
    ("table_float", paged(block_table=TABLE.astype(np.float32)), "block_table has dtype float32"),
    ("paged_batch", paged(q=Q[:3]), "q has 3 sequences but block_table has 2"),
    ("paged_cu_total", paged(q=Q, cu_seqlens_q=np.array([0, 3, 6], I32)),
     "cu_seqlens_q[2] = 6 must equal the tensor's 7 rows"),
    ("paged_cache_rank", paged(k_cache=KC[0]), "k_cache must have rank 4"),
    ("paged_caches_differ", paged(v_cache=KC[:3]), "k_cache and v_cache pages differ"),
    ("paged_head_dim", paged(q=random(RNG, (2, 4, 8), np.float32)), "q and k_cache head sizes differ"),
    ("merge_shape", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A[:1], LSE_A), "out_b shape [1, 4, 16]"),
    ("merge_lse_dtype", lambda: heed.merge_states(OUT_A, LSE_A.astype(np.float16), OUT_A, LSE_A),
     "lse_a dtype must be float32, got float16"),
    ("merge_lse_shape", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A, LSE_A[:, :2]), "lse_b shape [2, 2]"),
    ("merge_dtypes", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A.astype(np.float16), LSE_A), "out_b dtype"),
    ("merge_out_overlaps", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A.copy(), LSE_A, out=OUT_A[::-1]),
     "out overlaps out_a"),
    ("dense_lse_no_dv", lambda: heed.attention(DQ, DK, DV[..., :0], return_lse=True),
     "lse needs Dv >= 1"),
]

TYPE_ERRORS = [
    ("cu_list", varlen(cu_seqlens_q=[0, 3, 7]), "cu_seqlens_q must be an array"),
    ("cu_none", varlen(cu_seqlens_k=None), "cu_seqlens_k must be an array"),
    ("table_list", paged(block_table=[[0, 1], [2, 3]]), "block_table must be an array"),
    ("seqlens_none", paged(seqlens_k=None), "seqlens_k must be an array"),
    ("cu_seqlens_q_tuple", paged(q=Q, cu_seqlens_q=(0, 3, 7)), "cu_seqlens_q must be an array"),
    ("return_lse_string", varlen(return_lse="yes"), "return_lse must be a bool"),
    ("return_lse_int", paged(return_lse=1), "return_lse must be a bool"),
    ("dense_return_lse_none", lambda: heed.attention(DQ, DK, DV, return_lse=None),
     "return_lse must be a bool"),
    ("causal_int", varlen(causal=1), "causal must be a bool"),
    ("max_seqlen_float", varlen(max_seqlen_q=2.5), ""),
    ("route_int", paged(route=3), "route must be a str"),
    ("workspace_list", varlen(workspace=[0] * 64), "workspace must be an array"),
    ("no_mask", varlen(mask=np.ones((7, 9), bool)), "mask"),
    ("merge_list", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A.tolist(), LSE_A), "out_b must be an array"),
    ("merge_out_dict", lambda: heed.merge_states(OUT_A, LSE_A, OUT_A, LSE_A, out={}), "out must be an array"),
    ("plan_cu_list", lambda: heed.plan_varlen(Q, K, V, [0, 3, 7], CU_K), "cu_seqlens_q must be an array"),
]


def check(call, exception, text):
    with pytest.raises(exception) as info:
        call()
    assert text in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("call,text", [c[1:] for c in VALUE_ERRORS], ids=[c[0] for c in VALUE_ERRORS])
def test_value_errors(call, text):
    message = check(call, ValueError, text)
    assert message.startswith("[heed"), message


@pytest.mark.parametrize("call,text", [c[1:] for c in TYPE_ERRORS], ids=[c[0] for c in TYPE_ERRORS])
def test_type_errors(call, text):
    check(call, TypeError, text)


def test_errors_name_the_serving_op():
    """Every error of a serving call starts with that call's operation, the workspace's and the
    scratch budget's too."""
    case = next(c for c in RAGGED_CASES if c.name == "prefill_long")
    (q, k, v, cu_q, cu_k), kwargs, _ = ragged_inputs(case)
    for call in (lambda: heed.attention_varlen(q, k, v, cu_q, cu_k, workspace=np.empty(16, np.uint8), **kwargs),
                 lambda: heed.attention_varlen(q, k, v, cu_q, cu_k, max_scratch_bytes=1, **kwargs)):
        message = check(call, ValueError, "")
        assert message.startswith("[heed::attention_varlen]"), message


def test_plans_raise_what_the_calls_raise():
    for call, text in ((lambda: heed.plan_varlen(Q, K, V, np.array([1, 3, 7], I32), CU_K), "cu_seqlens_q[0] must be 0"),
                       (lambda: heed.plan_paged(QD, KC, KC, np.array([[0, 1], [9, 3]], I32), LENS),
                        "block_table[1, 0] = 9")):
        check(call, ValueError, text)


def test_nothing_written_on_error():
    out = np.full((7, 4, 16), 7.0, np.float32)
    with pytest.raises(ValueError):
        heed.attention_varlen(Q, K, V, CU_Q, np.array([0, 5, 8], I32), out=out)
    with pytest.raises(ValueError):
        heed.attention_paged(Q, KC, KC, np.array([[0, 1], [9, 3]], I32), LENS, cu_seqlens_q=CU_Q, out=out)
    assert (out == 7.0).all()


# --- PyTorch (CPU tensors; skipped, with the reason, where torch is not importable) ---


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_varlen_and_paged(dtype):
    torch = torch_or_skip()
    case = next(c for c in RAGGED_CASES if c.name == "mixed_causal")
    (q, k, v, cu_q, cu_k), kwargs, _ = ragged_inputs(case)
    tq, tk, tv = (torch.from_numpy(x).to(getattr(torch, dtype)) for x in (q, k, v))
    tk = tk.transpose(0, 1).contiguous().transpose(0, 1)  # head-major storage
    expected = reference.ragged_attention(*(t.float().numpy() for t in (tq, tk, tv)), cu_q, cu_k,
                                          1 / math.sqrt(case.head_dim), causal=True)
    out, lse = heed.attention_varlen(tq, tk, tv, torch.from_numpy(cu_q), torch.from_numpy(cu_k), causal=True,
                                     return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == tq.dtype and lse.dtype == torch.float32
    assert heed._heed.last_call()["k"] == tk.data_ptr()
    assert_both(out.float().numpy(), lse.numpy(), expected, dtype)

    paged_case = next(c for c in PAGED_CASES if c.name == "chunked_head_major_bf16")
    (q, k_cache, v_cache, table, seqlens_k), kwargs, _ = paged_inputs(dataclasses.replace(paged_case, dtype="float32"))
    tq, tkc, tvc = (torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype)) for x in (q, k_cache, v_cache))
    tkc = tkc.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # a head-major cache, permuted
    cu = torch.from_numpy(kwargs["cu_seqlens_q"])
    expected = reference.paged_attention(*(t.float().numpy() for t in (tq, tkc, tvc)), table, seqlens_k,
                                         1 / math.sqrt(paged_case.head_dim), cu_seqlens_q=kwargs["cu_seqlens_q"],
                                         causal=True)
    out, lse = heed.attention_paged(tq, tkc, tvc, torch.from_numpy(table), torch.from_numpy(seqlens_k),
                                    cu_seqlens_q=cu, causal=True, return_lse=True)
    assert isinstance(lse, torch.Tensor) and lse.shape == tq.shape[:2]
    assert heed._heed.last_call()["k"] == tkc.data_ptr()
    assert_both(out.float().numpy(), lse.numpy(), expected, dtype)


def test_torch_int64_metadata_is_named():
    torch = torch_or_skip()
    q, k = torch.from_numpy(Q), torch.from_numpy(K)
    check(lambda: heed.attention_varlen(q, k, k, torch.tensor([0, 3, 7]), torch.from_numpy(CU_K)), ValueError,
          "cu_seqlens_q has dtype int64; heed takes int32")


def test_torch_custom_ops_under_compile():
    torch = torch_or_skip()
    import heed.torch as heed_torch

    case = next(c for c in RAGGED_CASES if c.name == "sinks_mqa")
    (q, k, v, cu_q, cu_k), kwargs, _ = ragged_inputs(case)
    tq, tk, tv, tcu_q, tcu_k, tsinks = (torch.from_numpy(x) for x in (q, k, v, cu_q, cu_k, kwargs["sinks"]))
    eager = heed.attention_varlen(tq, tk, tv, tcu_q, tcu_k, sinks=tsinks, return_lse=True)
    op = heed_torch.attention_varlen(tq, tk, tv, tcu_q, tcu_k, tsinks, return_lse=True)
    assert torch.equal(op[0], eager[0]) and torch.equal(op[1], eager[1])
    assert torch.equal(heed_torch.attention_varlen(tq, tk, tv, tcu_q, tcu_k, tsinks), eager[0])
    torch.library.opcheck(torch.ops.heed.attention_varlen.default, (tq, tk, tv, tcu_q, tcu_k, tsinks))
    torch.library.opcheck(torch.ops.heed.attention_varlen_lse.default, (tq, tk, tv, tcu_q, tcu_k, tsinks))

    (pq, kc, vc, table, lens), pkwargs, _ = paged_inputs(next(c for c in PAGED_CASES if c.name == "chunked_prefill"))
    pq, kc, vc, table, lens, pcu = (torch.from_numpy(np.ascontiguousarray(x))
                                    for x in (pq, kc, vc, table, lens, pkwargs["cu_seqlens_q"]))
    torch.library.opcheck(torch.ops.heed.attention_paged.default, (pq, kc, vc, table, lens, pcu), {"causal": True})
    torch.library.opcheck(torch.ops.heed.attention_paged_lse.default, (pq, kc, vc, table, lens, pcu),
                          {"causal": True})
    dq, dk = torch.from_numpy(random(np.random.default_rng(8), (1, 4, 5, 16), np.float32)), torch.from_numpy(
        random(np.random.default_rng(9), (1, 2, 9, 16), np.float32))
    torch.library.opcheck(torch.ops.heed.attention_lse.default, (dq, dk, dk), {"causal": True})
    out_a, lse_a = heed_torch.attention(dq, dk[:, :, :4], dk[:, :, :4], return_lse=True)
    out_b, lse_b = heed_torch.attention(dq, dk[:, :, 4:], dk[:, :, 4:], return_lse=True)
    torch.library.opcheck(heed_torch.merge_states, (out_a, lse_a, out_b, lse_b))

    def step(q, k, v, cu_q, cu_k, sinks, pq, kc, vc, table, lens, pcu, dq, dk):
        out, lse = heed_torch.attention_varlen(q * 2, k, v, cu_q, cu_k, sinks, return_lse=True)
        paged = heed_torch.attention_paged(pq, kc, vc, table, lens, pcu, causal=True)
        a = heed_torch.attention(dq, dk[:, :, :4], dk[:, :, :4], return_lse=True)
        b = heed_torch.attention(dq, dk[:, :, 4:], dk[:, :, 4:], return_lse=True)
        merged, merged_lse = heed_torch.merge_states(*a, *b)
        return out + 1, lse, paged, merged, merged_lse

    args = (tq, tk, tv, tcu_q, tcu_k, tsinks, pq, kc, vc, table, lens, pcu, dq, dk)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break fails
    for got, expected in zip(compiled(*args), step(*args)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    whole, whole_lse = heed_torch.attention(dq, dk, dk, return_lse=True)
    merged, merged_lse = step(*args)[3:]
    torch.testing.assert_close(merged, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(merged_lse, whole_lse, rtol=1e-5, atol=1e-5)
