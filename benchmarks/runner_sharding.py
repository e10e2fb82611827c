"""Shard balance on PyTorch's real test times (file level), for N = 4, 8, 16, 64.

Prints largest shard / ideal (total / N) for crcr's longest-first assignment, the floor
set by the longest single file, and two baselines measured on the same data: files
dealt round robin in name order, and equal file counts per shard.

    .venv/bin/python benchmarks/runner_sharding.py
"""

from __future__ import annotations

from runners import sharding


def main() -> None:
    times = sharding.load_file_times()
    weights = {f"test/{name}.py": seconds for name, seconds in times.items()}
    total = sum(weights.values())
    longest = max(weights.values())
    names = sorted(weights)
    print(f"{len(weights)} files, {total / 3600:.1f} h in total, longest file {longest / 60:.0f} min")
    print(f"{'N':>4} {'crcr':>7} {'floor':>7} {'round-robin':>12} {'by-count':>9}")
    for n in (4, 8, 16, 64):
        ideal = total / n
        crcr = sharding.balance(weights, n)
        floor = max(1.0, longest / ideal)
        rr = max(sum(weights[f] for f in names[i::n]) for i in range(n)) / ideal
        size = -(-len(names) // n)
        by_count = max(sum(weights[f] for f in names[i * size:(i + 1) * size]) for i in range(n)) / ideal
        print(f"{n:>4} {crcr:>7.3f} {floor:>7.3f} {rr:>12.3f} {by_count:>9.3f}")


if __name__ == "__main__":
    main()
