"""Seeded, offline data for the course, one module per dataset.

- :mod:`companion.data.vocab`     tokens <-> ids, with ``<pad>``, ``<start>``, ``<end>``
- :mod:`companion.data.shapes`    images of coloured shapes with captions (and labels)
- :mod:`companion.data.dates`     human-readable dates -> ISO dates, character level
- :mod:`companion.data.expressions` arithmetic expressions -> bracketed parse trees
- :mod:`companion.data.sequences` copy / reverse a sequence of adjustable length
- :mod:`companion.data.coreference` which noun "it" refers to, decided by a property word
- :mod:`companion.data.digits`    the UCI 8×8 handwritten digits (shipped in the package, no download)
- :mod:`companion.data.text`      tiny Shakespeare, real text (shipped in the package, public domain)
- :mod:`companion.data.transforms` changes of image batches (shifts) to test what a model does with them

Every generator draws its random numbers in one batch from a generator seeded
by ``seed``, so the same call gives the same data on every machine; within a session the
same call is generated once and served from memory (:mod:`companion.data.cache`).
"""

from . import coreference, dates, digits, expressions, sequences, shapes, text, transforms, vocab
from .coreference import CorefBatch, make_coreference
from .dates import DateBatch, make_dates
from .digits import DigitsSplit, digits_split
from .expressions import ExpressionBatch, make_expressions
from .sequences import SequenceBatch, make_sequence_task
from .shapes import ShapesBatch, make_shapes
from .text import TextSplit, load_shakespeare, shakespeare_split
from .vocab import Vocab

__all__ = ["coreference", "dates", "digits", "expressions", "sequences", "shapes", "text", "transforms", "vocab",
           "CorefBatch", "DateBatch", "DigitsSplit", "ExpressionBatch", "SequenceBatch", "ShapesBatch", "TextSplit", "Vocab",
           "digits_split", "load_shakespeare", "make_coreference", "make_dates", "make_expressions", "make_sequence_task",
           "make_shapes", "shakespeare_split"]
