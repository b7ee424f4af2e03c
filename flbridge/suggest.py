""""Did you mean ...?" for names written in specs (functions, fields, constants).

difflib's ratio alone prefers a long name sharing scattered letters
(``x1_mmm`` -> ``x1_mem_map``) over the one-keystroke fix (``x1_mm``).
Candidates difflib finds close are ranked by edit distance (a transposition
counts as one edit), then by the longer shared prefix, then by the closer
length.
"""
from __future__ import annotations

import difflib


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions,
    substitutions and adjacent transpositions cost 1."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def closest(name: str, candidates, cutoff: float = 0.6) -> str | None:
    """The candidate `name` most likely misspells, or None if none is close."""
    name = str(name)
    cands = [c for c in dict.fromkeys(candidates) if isinstance(c, str)]
    if not cands or len(name) > 200:
        return None
    near = difflib.get_close_matches(name, cands, 8, cutoff)
    low = name.lower()
    near += [c for c in cands if c.lower() == low and c not in near]   # case-only mistakes
    if not near:
        return None
    return min(near, key=lambda c: (edit_distance(low, c.lower()), -_prefix(name, c), abs(len(c) - len(name)), c))
