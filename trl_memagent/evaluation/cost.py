"""What an evaluation cost, and what a 3.5M-token document would cost at the measured per-chunk rate.

The memory agent's cost is linear in document length: a document of L tokens takes ceil(L / C) memory
turns plus one answer turn, each with a prompt of (C + question + memory + template) tokens. The projection
multiplies the per-turn costs measured in this run by the turn count of the paper's longest setting.
"""

from __future__ import annotations

import math

from .store import OK

PROJECTION_TOKENS = 3_500_000


def _sum(records: list[dict], *keys: str) -> float:
    total = 0.0
    for record in records:
        value = record
        for key in keys:
            value = value[key]
        total += value
    return total


def cost_report(
    records: list[dict], wall_seconds: float, new_ids: set[str], chunk_tokens: int | None, mode: str
) -> dict:
    """Totals over finished records, this invocation's wall time and counts, and the 3.5M-token projection.

    `chunk_tokens` is None for the baseline, which reads at most its window whatever the length, so it has no
    projection. Two times per turn: latency (a group's wall time over its turns: what one question waits per
    chunk) and wall time (this invocation's wall time over the turns it finished: the throughput at this
    run's concurrency; absent when this invocation finished nothing).
    """
    ok = [r for r in records if r.get("status") == OK]
    report = {
        "mode": mode,
        "this_run": {
            "wall_seconds": round(wall_seconds, 3),
            "finished": sum(1 for r in ok if r["id"] in new_ids),
            "failed": sum(1 for r in records if r.get("status") != OK and r["id"] in new_ids),
        },
        "totals": {
            "samples": len(ok),
            "tokens_read": int(_sum(ok, "tokens", "read")),
            "tokens_generated": int(_sum(ok, "tokens", "generated")),
            "document_tokens": int(_sum(ok, "doc_tokens")),
            "requests": int(_sum(ok, "requests")),
            "backend_calls": round(sum(r["backend_calls"] / r["group_size"] for r in ok), 3),
            "sample_seconds": round(_sum(ok, "seconds"), 3),
        },
        "per_chunk": None,
        "projection": None,
    }
    chunks = _sum(ok, "num_chunks")
    if chunk_tokens is None or not ok or not chunks:
        return report
    new = [r for r in ok if r["id"] in new_ids]
    new_turns = _sum(new, "num_chunks") + len(new)
    # Template, question and memory tokens per memory turn: what a turn reads beyond its slice of document.
    overhead = (_sum(ok, "tokens", "memory_read") - _sum(ok, "doc_tokens")) / chunks
    per_chunk = {
        "prompt_overhead_tokens": round(overhead, 2),
        "memory_tokens_generated": round(_sum(ok, "tokens", "memory_generated") / chunks, 2),
        "final_tokens_read": round(_sum(ok, "tokens", "final_read") / len(ok), 2),
        "final_tokens_generated": round(_sum(ok, "tokens", "final_generated") / len(ok), 2),
        "latency_per_turn": sum(r["latency_seconds"] / (r["num_chunks"] + 1) for r in ok) / len(ok),
        "wall_seconds_per_turn": wall_seconds / new_turns if new_turns else None,
    }
    num_chunks = math.ceil(PROJECTION_TOKENS / chunk_tokens)
    report["per_chunk"] = {k: round(v, 6) if isinstance(v, float) else v for k, v in per_chunk.items()}
    report["projection"] = {
        "document_tokens": PROJECTION_TOKENS,
        "chunk_tokens": chunk_tokens,
        "chunks": num_chunks,
        "requests_per_question": num_chunks + 1,
        "tokens_read_per_question": round(PROJECTION_TOKENS + num_chunks * overhead + per_chunk["final_tokens_read"]),
        "tokens_generated_per_question": round(
            num_chunks * per_chunk["memory_tokens_generated"] + per_chunk["final_tokens_generated"]
        ),
        "latency_per_question": round((num_chunks + 1) * per_chunk["latency_per_turn"], 3),
        "wall_seconds_per_question": (
            round((num_chunks + 1) * per_chunk["wall_seconds_per_turn"], 3) if new_turns else None
        ),
    }
    return report


def cost_text(report: dict) -> str:
    """A few printable lines of a cost report."""
    totals, run = report["totals"], report["this_run"]
    lines = [
        f"cost: {totals['samples']} finished samples, {totals['tokens_read']:,} tokens read, "
        f"{totals['tokens_generated']:,} generated, {totals['requests']:,} requests in "
        f"{totals['backend_calls']:g} backend calls; this run: {run['finished']} finished, {run['failed']} failed "
        f"in {run['wall_seconds']:.1f}s"
    ]
    projection = report["projection"]
    if projection:
        lines.append(
            f"projected at {projection['document_tokens']:,} tokens ({projection['chunks']} chunks of "
            f"{projection['chunk_tokens']}): {projection['tokens_read_per_question']:,} tokens read, "
            f"{projection['tokens_generated_per_question']:,} generated, {projection['requests_per_question']} "
            f"requests, {projection['latency_per_question']:.1f}s latency per question"
            + (
                f" ({projection['wall_seconds_per_question']:.1f}s of wall time at this run's concurrency)"
                if projection["wall_seconds_per_question"] is not None
                else ""
            )
        )
    return "\n".join(lines)
