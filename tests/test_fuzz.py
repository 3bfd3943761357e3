"""The short seeded fuzz pass CI runs (the long run: ``cd tests && python -m fuzz --count
5000 --seed N``, see the README)."""

from __future__ import annotations

import collections

from fuzz import dlpack_fuzz
from fuzz.__main__ import BAD, report, run_compile
from fuzz.mutate import MUTATIONS, Mutator

SEED = 20260101


def test_mutations_are_seeded():
    a, b = Mutator(SEED), Mutator(SEED)
    assert [a.case(i) for i in range(30)] == [b.case(i) for i in range(30)]
    assert a.case(0) != Mutator(SEED + 1).case(0) or a.case(1) != Mutator(SEED + 1).case(1)


def test_every_mutation_changes_its_input():
    import random
    m = Mutator(SEED)
    text = m.inputs["vector_add.mlir"]
    for name, mutate in MUTATIONS.items():
        assert any(mutate(random.Random(i), text, m.pool) != text for i in range(5)), name


def test_short_compile_fuzz_pass():
    results = run_compile(SEED, 40, jobs=2, timeout=60)
    counts = collections.Counter(r["outcome"] for r in results)
    assert len(results) == 40
    assert not any(counts[o] for o in BAD + ("worker-crash",)), report(results)


def test_short_dlpack_fuzz_pass():
    counts = dlpack_fuzz.run_isolated(SEED, 1500)
    assert sum(counts.values()) == 1500, counts
    assert not any(counts.get(o) for o in BAD), counts
