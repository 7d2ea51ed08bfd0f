"""The cold path beside llguidance's: a vocabulary's init, the first compile of a process, and
tool sets compiled for the first time.

``constrain bench cold [--markdown FILE]`` prints, per tokenizer (the two bundled ones and,
when mistral-common is installed, its Tekken file: a 131k tiktoken-style vocabulary):

* **init**: building the vocabulary and its shared structures (`Vocabulary` + `warm_up`)
  against llguidance's tokenizer (`llguidance.hf.from_tokenizer`, or from a tiktoken
  encoding for Tekken), each in a fresh process;
* **first compile**: a schema's compile plus first mask as the first constraint of a
  process (after the warm-up) against the same schema compiled after another one, each in a
  fresh process: what a process pays once that the second schema does not;
* **tool sets**: one call among N tools (``anyOf`` of ``{"name": const, "arguments":
  parameters}``, what ``tool_choice: "required"`` compiles), parameters from Glaiveai2K that
  llguidance compiles (it refuses ``oneOf`` and ``dependencies``), each set new to both
  engines: compile plus first mask, ours and llguidance's.

Masks are full packed bitmasks; times are medians of `--repeat` fresh sets where stated.
Both engines run in the same process, one after the other, on a shared machine.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench"
TOOL_COUNTS = (1, 8, 32, 128)
TOKENIZERS = ("smollm2-135m-instruct", "gemma-3-270m", "tekken")
FIRST_SCHEMAS = ("Github_easy", "Glaiveai2K", "Kubernetes", "JsonSchemaStore", "Snowplow")


def tekken_path() -> Path | None:
    """mistral-common's Tekken file (its package data), if the package is installed."""
    import importlib.util

    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0], "data").glob("tekken_*.json"))
    return found[-1] if found else None


def _tekken(path: Path):
    """(token bytes by id, its tiktoken encoding) of a Tekken file: ids below the special
    count are special tokens (no bytes), then the byte-level ranks in order."""
    import tiktoken

    model = json.loads(path.read_text())
    config = model["config"]
    n_special = config["default_num_special_tokens"]
    n_ranks = config["default_vocab_size"] - n_special
    ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in model["vocab"][:n_ranks]}
    specials = {f"<SPECIAL_{i}>": i for i in range(n_special)}
    for s in model.get("special_tokens", []):
        specials[s["token_str"]] = s["rank"]
    token_bytes = [None] * n_special + [None] * n_ranks
    for data, rank in ranks.items():
        token_bytes[n_special + rank] = data
    encoding = tiktoken.Encoding("tekken", pat_str=config["pattern"],
                                 mergeable_ranks={d: r + n_special for d, r in ranks.items()},
                                 special_tokens=specials)  # fmt: skip
    return token_bytes, encoding


def load_tokenizer(name: str):
    """The tokenizer both engines start from (loading it is neither's init): a Hugging Face
    tokenizer, or for Tekken its token bytes and tiktoken encoding."""
    if name == "tekken":
        path = tekken_path()
        if path is None:
            raise ModuleNotFoundError("mistral-common is not installed")
        return _tekken(path)
    from constrain.models import load_tokenizer as load

    return load(name)


def vocabulary(tokenizer):
    """Our `Vocabulary` of a tokenizer of `load_tokenizer`."""
    from constrain.engine.vocab import Vocabulary

    if isinstance(tokenizer, tuple):
        return Vocabulary(tokenizer[0], [2], name="tekken")
    return Vocabulary.from_tokenizer(tokenizer)


def peer_tokenizer(tokenizer, n_vocab: int):
    """llguidance's tokenizer of a tokenizer of `load_tokenizer`."""
    if isinstance(tokenizer, tuple):
        import llguidance.tiktoken

        return llguidance.tiktoken.lltokenizer_from_encoding(tokenizer[1], n_vocab=n_vocab,
                                                             eos_token=2)  # fmt: skip
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=n_vocab)


def _ours(vocab, schema) -> float:
    """Seconds to compile `schema` for `vocab` and fill its first mask."""
    import constrain as cn

    started = time.perf_counter()
    cn.Constraint(cn.Grammar.from_json_schema(schema), vocab).start().bitmask()
    return time.perf_counter() - started


def _llguidance(tokenizer, schema, n_vocab: int) -> float:
    import llguidance
    import llguidance.numpy

    started = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise ValueError(matcher.get_error())
    mask = llguidance.numpy.allocate_token_bitmask(1, n_vocab)
    llguidance.numpy.fill_next_token_bitmask(matcher, mask)
    return time.perf_counter() - started


def _schema(subset: str, index: int = 0) -> dict:
    files = sorted((DATA / subset).glob("*.json"))
    return json.loads(files[index % len(files)].read_text())


def child(argv: list[str]) -> None:
    """In a fresh process: ``init NAME`` prints our and llguidance's init seconds; ``first
    NAME SUBSET [OTHER]`` prints the seconds of SUBSET's first schema after a warm-up (and
    after OTHER's, if given)."""
    import llguidance.hf
    import llguidance.tiktoken  # noqa: F401  (imports are the process's, not an init's)

    from constrain.constraints import warm_up

    what, name = argv[0], argv[1]
    tokenizer = load_tokenizer(name)
    if what == "init":
        started = time.perf_counter()
        vocab = vocabulary(tokenizer)
        warm_up(vocab)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        peer_tokenizer(tokenizer, vocab.size)
        print(json.dumps({"ours": ours, "llguidance": time.perf_counter() - started,
                          "size": vocab.size}))  # fmt: skip
        return
    vocab = vocabulary(tokenizer)
    warm_up(vocab)
    if len(argv) > 3:
        _ours(vocab, _schema(argv[3]))
    print(json.dumps({"seconds": _ours(vocab, _schema(argv[2]))}))


def _in_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "constrain.bench.cold", "--child", *args],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def init_rows(names: list[str]) -> list[str]:
    rows = ["| tokenizer | vocabulary | constrain init (s) | llguidance init (s) | ratio |",
            "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name in names:
        got = _in_child("init", name)
        rows.append(f"| {name} | {got['size']:,} | {got['ours']:.3f} | {got['llguidance']:.3f} "
                    f"| {got['ours'] / got['llguidance']:.2f}x |")  # fmt: skip
    return rows


def first_rows(names: list[str]) -> list[str]:
    rows = ["| tokenizer | schema | first in its process (ms) | after another (ms) | ratio |",
            "|---|---|---:|---:|---:|"]  # fmt: skip
    for name in names:
        for k, subset in enumerate(FIRST_SCHEMAS):
            other = FIRST_SCHEMAS[(k + 1) % len(FIRST_SCHEMAS)]
            first = _in_child("first", name, subset)["seconds"]
            second = _in_child("first", name, subset, other)["seconds"]
            rows.append(f"| {name} | {subset} first | {first * 1e3:.1f} | {second * 1e3:.1f} "
                        f"| {first / second:.2f}x |")  # fmt: skip
    return rows


def tool_set(params: list[tuple[str, dict]]) -> dict:
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": schema},
              "required": ["name", "arguments"], "additionalProperties": False}
             for name, schema in params]  # fmt: skip
    return {"anyOf": calls}


def tool_rows(names: list[str], repeat: int) -> list[str]:
    files = sorted((DATA / "Glaiveai2K").glob("*.json"))
    params = [(f.stem.rsplit("_", 1)[0], json.loads(f.read_text())) for f in files]
    rows = ["| tokenizer | tools | constrain (ms) | llguidance (ms) | ratio |",
            "|---|---:|---:|---:|---:|"]  # fmt: skip
    from constrain.constraints import warm_up

    for name in names:
        source = load_tokenizer(name)
        vocab = vocabulary(source)
        warm_up(vocab)
        tokenizer = peer_tokenizer(source, vocab.size)
        if name == names[0]:  # the tools both engines compile (llguidance refuses oneOf, ...)
            params = [p for p in params if _compiles(tokenizer, tool_set([p]), vocab.size)]
        offset = 0
        for n in TOOL_COUNTS:
            ours, theirs = [], []
            for _ in range(repeat):  # a new set each time: nothing of it is cached
                schema = tool_set(params[offset : offset + n])
                offset = (offset + n) % max(1, len(params) - n)
                ours.append(_ours(vocab, schema))
                theirs.append(_llguidance(tokenizer, schema, vocab.size))
            a = statistics.median(ours) * 1e3
            b = statistics.median(theirs) * 1e3
            rows.append(f"| {name} | {n} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
    return rows


def _compiles(tokenizer, schema, n_vocab: int) -> bool:
    try:
        _llguidance(tokenizer, schema, n_vocab)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="constrain bench cold", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--tokenizers", nargs="+", default=list(TOKENIZERS))
    parser.add_argument("--repeat", type=int, default=3, help="tool sets per size")
    parser.add_argument("--markdown", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    names = [n for n in args.tokenizers if n != "tekken" or tekken_path() is not None]
    report = ["# The cold path beside llguidance", "",
              "Generated by `constrain bench cold` (python -m constrain.bench.cold); "
              "x86_64, 2 shared cores.", "",
              "## A vocabulary's init (fresh process each)", ""]  # fmt: skip
    report += init_rows(names)
    print("\n".join(report), flush=True)
    report += ["", "## The first schema of a process (compile + first mask, after the "
               "warm-up; fresh processes)", ""]  # fmt: skip
    report += first_rows(names)
    print("\n".join(report[-len(names) * len(FIRST_SCHEMAS) - 2 :]), flush=True)
    report += ["", f"## Tool sets (compile + first mask; median of {args.repeat} new sets)", ""]
    report += tool_rows(names, args.repeat)
    print("\n".join(report[-len(names) * len(TOOL_COUNTS) - 2 :]), flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
