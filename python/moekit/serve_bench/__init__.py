"""moekit-serve-bench (`python -m moekit.serve_bench`): MoE experts implementations under Hugging
Face transformers 5's continuous batching, with `vllm bench serve`'s metrics (docs/serving.md).

metrics.py and workload.py are pure Python (no torch): CI tests them without a GPU. The rest
(models, engine, profile) imports torch and transformers when it runs.
"""
