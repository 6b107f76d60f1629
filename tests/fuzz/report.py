"""Run fuzz cases and print how many inputs were tried and how they ended.

    python3 -m tests.fuzz.report                 # the CI counts (tests/fuzz/test_fuzz_inputs.py)
    python3 -m tests.fuzz.report --scale 5       # five times more
    python3 -m tests.fuzz.report --family sql --count 100 --start 1000

Seeds run from ``--start`` upwards, so a run is reproducible and a broken case is replayed
with ``run_case(family, seed)``. Exits 1 when any case broke the contract.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tests.fuzz.cases import FAMILIES, run_case
from tests.fuzz.test_fuzz_inputs import COUNTS


def main(argv: list[str] | None = None) -> int:
    """Run the cases and print the distribution."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=FAMILIES, action="append", help="only these families")
    parser.add_argument("--count", type=int, help="cases per family (default: the CI counts x --scale)")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--start", type=int, default=0, help="first seed")
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    codes: dict[str, Counter] = {}
    damages: Counter = Counter()
    rule_errors: Counter = Counter()
    broken: list[str] = []
    total = 0
    began = time.perf_counter()
    for family in families:
        count = args.count if args.count is not None else max(1, int(COUNTS[family] * args.scale))
        codes[family] = Counter()
        for seed in range(args.start, args.start + count):
            total += 1
            try:
                result = run_case(family, seed)
            except AssertionError as exc:
                broken.append(f"{family}:{seed}: {str(exc).splitlines()[0][:300] if str(exc) else 'assertion'}")
                codes[family]["broken"] += 1
                continue
            codes[family][result.code] += 1
            for part in result.damage.split("+"):
                damages[(family, part, result.code)] += 1
            for err in result.rule_errors:
                rule_errors[err[:160]] += 1
    seconds = time.perf_counter() - began
    overall: Counter = Counter()
    for family, counter in codes.items():
        overall.update(counter)
        print(f"{family:6} {sum(counter.values()):6} cases  " + _dist(counter))
    print(f"{'all':6} {total:6} cases  " + _dist(overall) + f"   ({seconds:.0f} s)")
    print("\nexit codes by damage (family, damage: code x count):")
    by_damage: dict[tuple[str, str], Counter] = {}
    for (family, part, code), n in damages.items():
        by_damage.setdefault((family, part), Counter())[code] += n
    for (family, part), counter in sorted(by_damage.items()):
        print(f"  {family:6} {part:14} " + _dist(counter))
    if rule_errors:
        print("\nrule errors (exit 4):")
        for err, n in rule_errors.most_common(20):
            print(f"  {n:5}  {err}")
    if broken:
        print(f"\n{len(broken)} case(s) broke the contract:")
        for line in broken[:50]:
            print("  " + line)
        return 1
    print("\nno case broke the contract (no traceback, JSON valid, input unchanged)")
    return 0


def _dist(counter: Counter) -> str:
    return "  ".join(f"exit {code}: {n}" for code, n in sorted(counter.items(), key=lambda kv: str(kv[0])))


if __name__ == "__main__":
    sys.exit(main())
