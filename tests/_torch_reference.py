"""The torch-built models of ``benchmarks/training.py``, loaded for the tests that compare
the companion's Transformer and ViT with them number for number."""

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "training.py"
_spec = importlib.util.spec_from_file_location("_benchmarks_training", _path)
training = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(training)

TorchTransformer = training.TorchTransformer
TorchViT = training.TorchViT
