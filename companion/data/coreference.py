"""Who is "it"? A synthetic coreference task in the spirit of the lecture's sentence
"The animal didn't cross the street because it was too tired".

Every sentence names two nouns, then the pronoun ``it``, then a property word that decides
which noun ``it`` refers to:

    the animal did not cross the street because it was too tired   -> it = animal
    the animal did not cross the street because it was too wide    -> it = street
    the street was not crossed by the animal because it was too tired -> it = animal
    the vase did not fit in the basket because it was too small    -> it = basket

Each *frame* (a verb with two noun roles, ``x`` and ``y``) has an active and a passive word
order, so neither the position nor the order of the nouns tells which one is meant; only
the property word does (``tired`` belongs to the role ``x``, ``wide`` to ``y``). The task:
read the sentence, and at the pronoun name the noun it refers to.

The referent is decidable by construction: every property word belongs to exactly one
(frame, role), and the two roles of a frame draw their nouns from disjoint lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validate import require_number, require_positive_int, require_seed
from .cache import cached_dataset
from .vocab import Vocab


@dataclass(frozen=True)
class Frame:
    """A sentence frame: two word orders with the slots ``{x}``, ``{y}``, ``{prop}``, the
    nouns that may fill each role and the property words that pick each role."""

    active: str
    passive: str
    x_nouns: tuple[str, ...]
    y_nouns: tuple[str, ...]
    x_props: tuple[str, ...]
    y_props: tuple[str, ...]


FRAMES = {
    "cross": Frame(
        active="the {x} did not cross the {y} because it was too {prop}",
        passive="the {y} was not crossed by the {x} because it was too {prop}",
        x_nouns=("animal", "dog", "horse", "cat", "child", "man"),
        y_nouns=("street", "road", "river", "bridge", "field", "square"),
        x_props=("tired", "slow", "scared", "weak"),
        y_props=("wide", "busy", "long", "icy"),
    ),
    "fit": Frame(
        active="the {x} did not fit in the {y} because it was too {prop}",
        passive="the {y} could not hold the {x} because it was too {prop}",
        x_nouns=("trophy", "ball", "box", "book", "lamp", "vase"),
        y_nouns=("suitcase", "bag", "drawer", "shelf", "basket", "crate"),
        x_props=("big", "large", "tall", "heavy"),
        y_props=("small", "full", "narrow", "short"),
    ),
}
PRONOUN = "it"


def _words() -> list[str]:
    """Every word of every frame, in a fixed order (so the ids are the same everywhere)."""
    words: list[str] = []
    for frame in FRAMES.values():
        for part in (frame.active, frame.passive):
            words += [w for w in part.split() if not w.startswith("{")]
        words += [*frame.x_nouns, *frame.y_nouns, *frame.x_props, *frame.y_props]
    return list(dict.fromkeys(words))  # unique, first occurrence first


COREF_VOCAB = Vocab(_words())
NOUNS = [n for f in FRAMES.values() for n in (*f.x_nouns, *f.y_nouns)]
PROPERTY_ROLE = {p: (name, role) for name, f in FRAMES.items()
                 for role, props in (("x", f.x_props), ("y", f.y_props)) for p in props}


@dataclass
class CorefBatch:
    """One generated batch of ``n`` sentences, padded to ``N`` tokens.

    ``tokens (n, N)`` word ids (``<pad>`` after ``lengths``); positions (each ``(n,)``):
    ``pronoun`` of ``it``, ``referent`` of the noun ``it`` refers to, ``other`` of the other
    noun, ``prop`` of the property word; ``label (n,)`` the referent's word id (the answer);
    ``passive (n,)`` True for the second word order."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    pronoun: torch.Tensor
    referent: torch.Tensor
    other: torch.Tensor
    prop: torch.Tensor
    label: torch.Tensor
    passive: torch.Tensor
    vocab: Vocab

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def words(self, i: int) -> list[str]:
        """The words of sentence ``i`` (without padding)."""
        return self.vocab.decode(self.tokens[i, : int(self.lengths[i])], strip=False)


def _slots(template: str) -> dict[str, int]:
    """Positions of ``{x}``, ``{y}``, ``{prop}`` and the pronoun in a template."""
    words = template.split()
    return {"x": words.index("{x}"), "y": words.index("{y}"), "prop": words.index("{prop}"),
            "pronoun": words.index(PRONOUN)}


@cached_dataset
def make_coreference(n: int, seed: int = 0, passive_share: float = 0.5) -> CorefBatch:
    """``n`` sentences with two nouns, ``it`` and a property word that decides the referent.

    Frame, nouns, word order (passive with probability ``passive_share``), the role the
    pronoun refers to (``x`` or ``y``, half each) and the property word are drawn in one batch
    from a ``torch.Generator`` seeded with ``seed``, so the same call gives the same data on
    every machine.
    """
    require_positive_int("n", n)
    require_seed("seed", seed)
    require_number("passive_share", passive_share, 0.0)
    if passive_share > 1.0:
        raise ValueError(f"passive_share must be in [0, 1], got {passive_share!r}")
    frames = list(FRAMES.values())
    g = torch.Generator().manual_seed(seed)
    draws = torch.rand(n, 6, generator=g)  # (n, 6): frame, x, y, order, role, property
    which = (draws[:, 0] * len(frames)).long().clamp(max=len(frames) - 1).tolist()
    passive = (draws[:, 3] < passive_share).tolist()
    to_y = (draws[:, 4] < 0.5).tolist()  # True: "it" is the y noun
    rows, positions, labels = [], [], []
    for i in range(n):
        f = frames[which[i]]
        pick = lambda seq, u: seq[min(int(u * len(seq)), len(seq) - 1)]  # noqa: E731
        x, y = pick(f.x_nouns, draws[i, 1].item()), pick(f.y_nouns, draws[i, 2].item())
        prop = pick(f.y_props if to_y[i] else f.x_props, draws[i, 5].item())
        template = f.passive if passive[i] else f.active
        slots = _slots(template)
        rows.append(template.format(x=x, y=y, prop=prop).split())
        ref, oth = ("y", "x") if to_y[i] else ("x", "y")
        positions.append((slots["pronoun"], slots[ref], slots[oth], slots["prop"]))
        labels.append(y if to_y[i] else x)
    tokens, lengths = COREF_VOCAB.encode_batch(rows)  # (n, N), (n,)
    pos = torch.tensor(positions, dtype=torch.long)  # (n, 4)
    return CorefBatch(tokens=tokens, lengths=lengths, pronoun=pos[:, 0], referent=pos[:, 1],
                      other=pos[:, 2], prop=pos[:, 3],
                      label=torch.tensor(COREF_VOCAB.encode(labels), dtype=torch.long),
                      passive=torch.tensor(passive), vocab=COREF_VOCAB)


def resolve(words: list[str]) -> str:
    """The noun that ``it`` refers to in a sentence of this task, found by the rule (not
    by the generator): the property word names the role, the frame's word order the slot."""
    if not words or words[-1] not in PROPERTY_ROLE:
        raise ValueError(f"the sentence must end with a property word of the task, got {words!r}")
    name, role = PROPERTY_ROLE[words[-1]]
    frame = FRAMES[name]
    for template in (frame.active, frame.passive):
        t = template.split()
        fixed = [j for j, w in enumerate(t) if not w.startswith("{")]
        if len(t) == len(words) and all(t[j] == words[j] for j in fixed):
            return words[_slots(template)[role]]
    raise ValueError(f"the sentence fits no word order of the frame {name!r}: {' '.join(words)}")
