#!/usr/bin/env python3
"""A list-scheduling model of a persistent decode step (issue 55): how long one token step would take if
the kernels of today's step were tiles of one kernel that any SM takes as soon as its dependencies are met.

Each row block (128 rows of cores) is a chain of phases, event by event: the head, then per FFN step the
RMSNorm (after the first), the dual GEMM's tiles and the w2 GEMM's tiles. A phase's tiles may start once
the row block's previous phase has finished and `--sync` microseconds have passed (a dependency counter
in L2); row blocks are independent until the collapse, so an SM takes a tile of whichever row block is
furthest behind. Tile times are inputs: measure them (scripts/step_breakdown.py) rather than trust the
defaults, which are today's kernels at B = 1 on an H100 less their launch and tail.
Usage: python3 scripts/step_schedule_model.py [--row-blocks 4] [--dual 12.5] [--w2 6.5] [--sync 1] ...
"""
import argparse
import heapq


def step_time(a: argparse.Namespace) -> float:
    """Microseconds from the first tile to the last row block's last phase, plus the collapse."""
    chain = []  # (tiles, us per tile) per phase of one row block
    for _ in range(a.events):
        chain.append((a.head_ctas, a.head))
        for i in range(a.k_ffn):
            if i:
                chain.append((a.rms_ctas, a.rms))
            chain += [(a.dual_tiles, a.dual), (a.w2_tiles, a.w2)]
    phase = [0] * a.row_blocks
    to_issue = [chain[0][0]] * a.row_blocks
    running = [0] * a.row_blocks
    ready = [0.0] * a.row_blocks  # when the row block's current phase may start
    last_end = [0.0] * a.row_blocks
    sms = [(0.0, s) for s in range(a.sms)]  # (free from, sm)
    done = []  # (end, row block) of issued tiles
    while any(p < len(chain) for p in phase):
        free_at, sm = heapq.heappop(sms)
        issuable = [r for r in range(a.row_blocks) if phase[r] < len(chain) and to_issue[r] and ready[r] <= free_at]
        if issuable:
            r = min(issuable, key=lambda r: (phase[r], r))
            to_issue[r] -= 1
            running[r] += 1
            end = free_at + chain[phase[r]][1]
            heapq.heappush(done, (end, r))
            heapq.heappush(sms, (end, sm))
            continue
        # Nothing to start now: retire the earliest tile (it may open the next phase) or wait for a phase.
        waits = [ready[r] for r in range(a.row_blocks) if phase[r] < len(chain) and to_issue[r]]
        if done and (not waits or done[0][0] <= min(waits)):
            end, r = heapq.heappop(done)
            running[r] -= 1
            last_end[r] = max(last_end[r], end)
            if running[r] == 0 and to_issue[r] == 0:
                phase[r] += 1
                if phase[r] < len(chain):
                    to_issue[r], ready[r] = chain[phase[r]][0], last_end[r] + a.sync
            heapq.heappush(sms, (free_at, sm))
        else:
            heapq.heappush(sms, (max(free_at, min(waits)), sm))
    return max(last_end) + a.collapse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--row-blocks", type=int, default=4, help="128-row blocks: 4 at B = 1")
    ap.add_argument("--events", type=int, default=8)
    ap.add_argument("--k-ffn", type=int, default=2)
    ap.add_argument("--dual", type=float, default=12.5, help="us per dual GEMM tile (128 x 256, k = 1024: 11.2 of MMA)")
    ap.add_argument("--dual-tiles", type=int, default=32)
    ap.add_argument("--w2", type=float, default=6.5, help="us per w2 tile (64 x 64, k = 4096: 5.6 of MMA)")
    ap.add_argument("--w2-tiles", type=int, default=32)
    ap.add_argument("--head", type=float, default=4.0)
    ap.add_argument("--head-ctas", type=int, default=32)
    ap.add_argument("--rms", type=float, default=2.0)
    ap.add_argument("--rms-ctas", type=int, default=32)
    ap.add_argument("--sync", type=float, default=1.0, help="us from a phase's end to its successor's start")
    ap.add_argument("--collapse", type=float, default=14.4)
    a = ap.parse_args()
    print(f"{step_time(a):.1f} us per step")


if __name__ == "__main__":
    main()
