"""Model calls and tokens per question (and per stored turn) with a scripted model, through the harness.

A scripted OpenAI-compatible server (`tests/openai_stub.py`) runs on loopback
and answers every role by its output contract: the plan restates the question,
the Judge passes when an evidence line holds at least half of the question's
content words and asks for a Retry otherwise, the answer is the best line. The
evaluation harness then ingests LoCoMo conversations and asks the first
questions of each through the real `langchain-openai` client, counting every
call (retries included) and its reported tokens. Target: at most 3 model calls
per question on average at k_r=2.

    .venv/bin/python benchmarks/model_calls.py [--files conv-26.json conv-30.json] [--questions 40]
                                               [--sessions 4] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("OPENAI_API_KEY", "sk-scripted-not-a-key")  # the loopback server ignores it

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo"
sys.path.insert(0, str(REPO / "tests"))

from openai_stub import OpenAIStub  # noqa: E402
from strata.evaluation.harness import HarnessOptions, run  # noqa: E402


def sliced(path: Path, sessions: int, folder: Path) -> Path:
    """The conversation cut to its first `sessions` sessions, with the questions whose evidence lies in them."""
    data = json.loads(path.read_text(encoding="utf-8"))
    sample = data[0] if isinstance(data, list) else data
    nested = "conversation" in sample
    conversation = dict(sample["conversation"] if nested else sample)
    for key in list(conversation):
        found = re.search(r"session_(\d+)", key)
        if found and int(found.group(1)) > sessions:
            del conversation[key]
    ids = {t["dia_id"] for value in conversation.values() if isinstance(value, list) for t in value
           if isinstance(t, dict) and "dia_id" in t}
    qa = [q for q in sample["qa"] if q.get("evidence") and set(q["evidence"]) <= ids]
    cut = {**sample, "conversation": conversation, "qa": qa} if nested else {**conversation, "qa": qa}
    out = folder / path.name
    out.write_text(json.dumps(cut if isinstance(data, dict) else [cut]), encoding="utf-8")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", default=["conv-26.json", "conv-30.json"])
    parser.add_argument("--questions", type=int, default=40, help="first N questions per conversation")
    parser.add_argument("--sessions", type=int, default=4, help="first N sessions of each conversation (0: all)")
    parser.add_argument("--k-r", type=int, default=2, choices=[0, 1, 2, 3])
    parser.add_argument("--out", default="", help="write the figures as JSON here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub() as stub:
        folder = Path(tmp)
        files = [LOCOMO / f if not Path(f).exists() else Path(f) for f in args.files]
        if args.sessions:
            files = [sliced(f, args.sessions, folder) for f in files]
        system = f"k_r={args.k_r}"
        report = run(HarnessOptions(
            files=[str(f) for f in files], out=str(folder / "eval"), systems=[system], model="openai:scripted",
            base_url=stub.url, judge_model="offline", questions=args.questions, quiet=True,
        ))
        lines = (folder / "eval" / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines]
        roles = Counter(stub.roles())
    cost = next(f for f in report["systems"] if f["system"] == system)["cost"]
    calls = [r["model_calls"] for r in rows if r["system"] == system]
    summary = {
        "system": system, "files": [f.name for f in files], "sessions": args.sessions or "all",
        "questions": len(calls), "turns": cost["ingest_turns"],
        "model_calls_per_question": cost["model_calls_per_question"],
        "model_tokens_per_question": cost["model_tokens_per_question"],
        "model_calls_per_turn": cost["model_calls_per_turn"],
        "model_tokens_per_turn": cost["model_tokens_per_turn"],
        "rounds_per_question": cost["rounds_mean"],
        "calls_per_question_histogram": dict(sorted(Counter(calls).items())),
        "requests_by_role": dict(roles),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
