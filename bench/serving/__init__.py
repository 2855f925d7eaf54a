"""The parts of bench/bench_serving.py, the decode-serving benchmark (a DeepSeek-V3 MLA attention stack served
with continuous batching at a fixed KV budget, FP8 SnapMLA cache against a BF16 cache):

- model.py:     the MLA attention block (absorbed form) with random BF16 weights, real shapes
- backends.py:  the caches, KV writes and decode calls: SnapMLA FP8, FlashMLA BF16, FlashAttention-3, reference
- allocator.py: pages of the KV budget, the request stream, continuous batching, slot mapping
- capacity.py:  how many requests fit a budget at each context length (pure arithmetic)
"""
