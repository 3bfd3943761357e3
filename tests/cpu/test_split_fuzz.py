"""A short seeded pass of the split fuzzer (tests/fuzz/split_fuzz.py; the long run: ``cd
tests && nice python -m fuzz.split_fuzz --count 1000 --seed N``)."""

from __future__ import annotations

from fuzz.split_fuzz import BAD, report, run
from fuzz.split_gen import make_case

SEED = 20260102


def test_cases_are_seeded():
    assert make_case(SEED, 3).text == make_case(SEED, 3).text
    assert make_case(SEED, 3).text != make_case(SEED + 1, 3).text


def test_short_split_fuzz_pass():
    results = run(SEED, list(range(8)))
    assert len(results) == 8
    assert sum(r.get("split", 0) for r in results), report(results)
    assert not any(r["outcome"] in BAD for r in results), report(results)
