"""Check the parameter dumps of ms_train.py / torch_train.py.

The training examples append one JSON line per step to ``<out>/params_rank<R>.jsonl``
(and ``params_reference.jsonl`` in ``--reference`` mode):
``{"step": S, "rank": R, "size": N, "loss": L, "params": [floats...]}``.

Checks: every rank 0..N-1 has a file, all ranks have the same steps (``steps`` given:
exactly 1..steps), the params of every rank are identical at every step (``rank_tol``,
default 0: bitwise), and, with ``reference``, equal to the reference within ``tol``
(default 1e-6) at every step.

Library use::

    from compare_params import compare, check
    ok, msg = compare(out_dir, world_size=2, reference=True, steps=5)
    check(out_dir, 2, reference=True)          # raises AssertionError(msg) on mismatch

CLI::

    python examples/compare_params.py OUT_DIR WORLD_SIZE [--reference [FILE]] [--steps N]
                                       [--tol 1e-6] [--rank-tol 0]

prints one line (``PARAMS_OK ...`` or ``PARAMS_MISMATCH: ...``) and exits 0 or 1.
"""
import argparse
import json
import os
import sys

REFERENCE_NAME = "params_reference.jsonl"


def rank_file(out_dir, rank):
    return os.path.join(out_dir, f"params_rank{rank}.jsonl")


def load_params(path):
    """{step: [floats]} from one JSON-lines dump. Ignores a torn last line."""
    result = {}
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a writer killed mid-line
            result[int(rec["step"])] = [float(v) for v in rec["params"]]
    return result


def _max_diff(a, b):
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare(out_dir, world_size, reference=False, steps=None, tol=1e-6, rank_tol=0.0):
    """Return (ok, one_line_message).

    ``reference``: False (skip), True (``<out_dir>/params_reference.jsonl``) or a path.
    """
    world_size = int(world_size)
    if world_size < 1:
        return False, f"world size must be >= 1, got {world_size}"
    per_rank = {}
    for r in range(world_size):
        path = rank_file(out_dir, r)
        if not os.path.isfile(path):
            return False, f"missing params file for rank {r}: {path}"
        per_rank[r] = load_params(path)

    base = per_rank[0]
    base_steps = sorted(base)
    if not base_steps:
        return False, f"rank 0 wrote no steps ({rank_file(out_dir, 0)})"
    if steps is not None and base_steps != list(range(1, int(steps) + 1)):
        return False, (f"rank 0 has steps {base_steps[0]}..{base_steps[-1]} ({len(base_steps)}), "
                       f"expected 1..{steps}")
    for r in range(1, world_size):
        if sorted(per_rank[r]) != base_steps:
            return False, (f"rank {r} has steps {sorted(per_rank[r])}, rank 0 has {base_steps}")
        for s in base_steps:
            d = _max_diff(per_rank[r][s], base[s])
            if d > rank_tol:
                return False, f"rank {r} differs from rank 0 at step {s} (max abs diff {d:.3g})"

    ref_note = ""
    if reference:
        ref_path = os.path.join(out_dir, REFERENCE_NAME) if reference is True else str(reference)
        if not os.path.isfile(ref_path):
            return False, f"missing reference params file: {ref_path}"
        ref = load_params(ref_path)
        worst = 0.0
        for s in base_steps:
            if s not in ref:
                return False, f"reference has no step {s} ({ref_path})"
            d = _max_diff(base[s], ref[s])
            if d > tol:
                return False, f"ranks differ from the reference at step {s} (max abs diff {d:.3g} > {tol:g})"
            worst = max(worst, d)
        ref_note = f", equal to reference within {tol:g} (max abs diff {worst:.3g})"

    return True, (f"PARAMS_OK {world_size} ranks identical over {len(base_steps)} steps"
                  f" ({len(base[base_steps[0]])} params){ref_note}")


def check(out_dir, world_size, reference=False, steps=None, tol=1e-6, rank_tol=0.0):
    """Like compare() but raises AssertionError(message) on mismatch; returns the message."""
    ok, msg = compare(out_dir, world_size, reference=reference, steps=steps, tol=tol, rank_tol=rank_tol)
    if not ok:
        raise AssertionError(msg)
    return msg


def main(argv=None):
    p = argparse.ArgumentParser(description="Check per-rank parameter dumps.")
    p.add_argument("out_dir")
    p.add_argument("world_size", type=int)
    p.add_argument("--reference", nargs="?", const=True, default=False,
                   help="compare to <out_dir>/params_reference.jsonl or to FILE")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--rank-tol", type=float, default=0.0)
    a = p.parse_args(argv)
    try:
        ok, msg = compare(a.out_dir, a.world_size, reference=a.reference, steps=a.steps,
                          tol=a.tol, rank_tol=a.rank_tol)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        ok, msg = False, f"cannot read params: {exc}"
    print(msg if ok else f"PARAMS_MISMATCH: {msg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
