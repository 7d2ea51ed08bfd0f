"""JSON whitespace layouts: what the model writes in each mode, and what each mode costs.

With the bundled SmolLM2-135M-Instruct, for N schemas (the repository's schemas/, then
JSONSchemaBench schemas of the shared data taken round-robin over the subsets, in file order,
among those whose text is short and that compile in every mode), and the prompt "Generate a
JSON object valid under this JSON Schema: ...":

* every `whitespace` mode (compact, default, natural, pretty) generates with the same prompt
  and seeds: sampling at temperature 1 with S seeds, and greedy decoding, `max_tokens` M
  (modes interleaved per answer, so a change in the machine's load touches them alike).
  Reported per mode: answers complete and valid (finish "stop" and `jsonschema` validates
  `out.value`), cut (finish "length"), output tokens, whitespace characters outside strings
  and whitespace-only tokens per answer, answers on several lines, answers laid out exactly as
  a JSON printer lays them out (``json.dumps`` with compact separators, without or with
  ``indent`` 2, 4 or a tab), answers the "natural" grammar admits, and seconds per answer.
* compile cost per layout on JSONSchemaBench schemas (round-robin, any size): grammar rules,
  compile time and the first mask.

Run: ``python bench/whitespace.py [--limit 20] [--seeds 2] [--max-tokens 128]
[--markdown docs/benchmarks/whitespace.md]``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from pathlib import Path

# run as a script: import `bench.common` and `constrain` from the repository root
if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import jsonschema

import constrain as cn
from bench.common import argument_parser, emit
from constrain.bench.report import fmt
from constrain.jsonschema import compile_schema

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PROMPT = "Generate a JSON object valid under this JSON Schema:\n{schema}"
MODES = ("compact", "default", "natural", "pretty")
_WS = " \t\n\r"


# -- schemas -------------------------------------------------------------------------------------


def _compiles(schema, modes) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for mode in modes:
                cn.Grammar.from_json_schema(schema, whitespace=mode)
        except cn.ConstrainError:
            return False
    return True


def bench_files(data: Path) -> list[tuple[str, Path]]:
    """JSONSchemaBench files, round-robin over the subsets, each subset in file order."""
    root = data / "jsonschemabench"
    if not root.is_dir():
        return []
    queues = [sorted(s.glob("*.json")) for s in sorted(root.iterdir()) if s.is_dir()]
    files = []
    for i in range(max(map(len, queues), default=0)):
        files += [(f"{q[i].parent.name}/{q[i].stem}", q[i]) for q in queues if i < len(q)]
    return files


def pick_schemas(data: Path, n: int, max_chars: int, modes) -> list[tuple[str, dict]]:
    """The repository's example schemas, then short JSONSchemaBench schemas compiling in
    every mode, up to `n`."""
    picked = [(f"schemas/{name}", cn.schemas.load(name)) for name in cn.schemas.names()][:n]
    for name, path in bench_files(data):
        if len(picked) >= n:
            break
        text = path.read_text()
        if len(text) <= max_chars and _compiles(json.loads(text), modes):
            picked.append((name, json.loads(text)))
    return picked


# -- what an answer's layout is --------------------------------------------------------------


def layout_whitespace(text: str) -> int:
    """Whitespace characters outside strings."""
    count, inside, escaped = 0, False, False
    for ch in text:
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        elif ch in _WS:
            count += 1
    return count


def json_tokens(text: str) -> list[str]:
    """The JSON tokens of `text` (strings, scalars, punctuation), whitespace dropped."""
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _WS:
            i += 1
        elif ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            tokens.append(text[i : j + 1])
            i = j + 1
        elif ch in "{}[]:,":
            tokens.append(ch)
            i += 1
        else:
            j = i
            while j < n and text[j] not in _WS and text[j] not in '{}[]:,"':
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


def printed(tokens: list[str], indent: str | None, one_line_spaces: bool = False) -> str:
    """The tokens laid out as ``json.dumps`` lays them out: `indent` per level (None: one
    line, with ", " and ": " when `one_line_spaces`, else compact separators)."""
    out, depth = [], 0
    for i, token in enumerate(tokens):
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if token in "{[":
            out.append(token)
            if after not in ("}", "]"):
                depth += 1
                out.append("\n" + indent * depth if indent is not None else "")
        elif token in "}]":
            if tokens[i - 1] not in ("{", "["):
                depth -= 1
                out.append("\n" + indent * depth if indent is not None else "")
            out.append(token)
        elif token == ",":
            out.append(",")
            out.append("\n" + indent * depth if indent is not None else " " * one_line_spaces)
        elif token == ":":
            out.append(": " if indent is not None or one_line_spaces else ":")
        else:
            out.append(token)
    return "".join(out)


def printer_layout(text: str) -> bool:
    """Whether `text` is laid out exactly as ``json.dumps`` lays it out: compact separators,
    one line with spaces, or an indent of 2 or 4 spaces or a tab."""
    tokens = json_tokens(text)
    layouts = [printed(tokens, None), printed(tokens, None, one_line_spaces=True)]
    layouts += [printed(tokens, unit) for unit in ("  ", "    ", "\t")]
    return text in layouts


# -- generation --------------------------------------------------------------------------------


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def generate_all(model, schemas, modes, seeds: list[int], max_tokens: int) -> list[dict]:
    """One record per answer: every schema x decoding (each seed, greedy) x mode."""
    records = []
    for n, (name, schema) in enumerate(schemas):
        prompt = PROMPT.format(schema=json.dumps(schema))
        validator = _validator(schema)
        natural = cn.Grammar.from_json_schema(schema, whitespace="natural")
        decodings = [(f"t=1 seed {s}", {"seed": s}) for s in seeds] + [("greedy", {"greedy": True})]
        for decoding, options in decodings:
            for mode in modes:
                t0 = time.perf_counter()
                out = cn.generate(
                    model,
                    prompt,
                    schema=schema,
                    schema_options={"whitespace": mode},
                    max_tokens=max_tokens,
                    **options,
                )
                seconds = time.perf_counter() - t0
                stop = out.finish_reason == "stop" and out.complete
                try:
                    valid = stop and validator.is_valid(out.value)
                except Exception as exc:  # a schema jsonschema cannot evaluate
                    print(f"# {name}: jsonschema: {exc!r:.80}", file=sys.stderr)
                    valid = False
                records.append(
                    {
                        "schema": name,
                        "mode": mode,
                        "decoding": decoding,
                        "sampled": decoding != "greedy",
                        "text": out.text,
                        "finish": out.finish_reason,
                        "valid": valid,
                        "tokens": len(out.tokens),
                        "ws_chars": layout_whitespace(out.text),
                        "ws_tokens": sum(
                            1 for t in out.tokens if not model.vocab.token_bytes(t).strip()
                        ),
                        "lines": out.text.count("\n") + 1,
                        "printer": stop and printer_layout(out.text),
                        "natural": stop and natural.matches(out.text),
                        "seconds": seconds,
                    }
                )
        print(f"# {n + 1}/{len(schemas)} {name}", file=sys.stderr, flush=True)
    return records


def _generation_table(records: list[dict], modes) -> str:
    head = (
        "| mode | decoding | answers | complete & valid | cut (length) | tokens mean / median "
        "| whitespace chars / answer | whitespace-only tokens / answer | on several lines "
        "| a printer's exact layout | admitted by natural | s / answer |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for sampled, decoding in ((True, "t=1"), (False, "greedy")):
        for mode in modes:
            rs = [r for r in records if r["mode"] == mode and r["sampled"] == sampled]
            if not rs:
                continue
            n = len(rs)
            tokens = [r["tokens"] for r in rs]
            stopped = sum(r["finish"] == "stop" for r in rs)

            def share(key, of=n, rs=rs):
                return f"{sum(bool(r[key]) for r in rs)}/{of}"

            rows.append(
                f"| {mode} | {decoding} | {n} | {share('valid')} "
                f"| {sum(r['finish'] == 'length' for r in rs)}/{n} "
                f"| {fmt(statistics.mean(tokens))} / {fmt(statistics.median(tokens))} "
                f"| {fmt(statistics.mean(r['ws_chars'] for r in rs))} "
                f"| {fmt(statistics.mean(r['ws_tokens'] for r in rs))} "
                f"| {sum(r['lines'] > 1 for r in rs)}/{n} "
                f"| {share('printer', stopped)} | {share('natural', stopped)} "
                f"| {fmt(statistics.mean(r['seconds'] for r in rs), 2)} |"
            )
    return "\n".join(rows)


# -- compile cost ------------------------------------------------------------------------------


LAYOUTS = ("compact", "default", "natural", "pretty")


def compile_costs(data: Path, limit: int, vocab) -> list[dict]:
    """Per schema and layout: rules, compile seconds, first mask seconds (None: no compile)."""
    records = []
    for name, path in bench_files(data)[:limit]:
        schema = json.loads(path.read_text())
        for layout in LAYOUTS:
            record = {"schema": name, "layout": layout, "rules": None}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                try:
                    ir, _ = compile_schema(schema, whitespace=layout)
                    grammar = cn.Grammar.from_json_schema(schema, whitespace=layout)
                except cn.ConstrainError:
                    records.append(record)
                    continue
                # compiled twice: the IR for its size, the grammar as users get it
                record["compile_s"] = (time.perf_counter() - t0) / 2
            record["rules"] = len(ir.rules)
            t0 = time.perf_counter()
            cn.Constraint(grammar, vocab).start().mask()
            record["mask_s"] = time.perf_counter() - t0
            records.append(record)
    return records


def _cost_table(records: list[dict]) -> str:
    rows = [
        "| layout | schemas compiled | rules total | rules median | rules max "
        "| compile ms median | compile s total | first mask ms median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for layout in LAYOUTS:
        rs = [r for r in records if r["layout"] == layout]
        ok = [r for r in rs if r["rules"] is not None]
        if not ok:
            continue
        rules = [r["rules"] for r in ok]
        rows.append(
            f"| {layout} | {len(ok)}/{len(rs)} | {fmt(sum(rules), 0)} "
            f"| {fmt(statistics.median(rules), 0)} | {fmt(max(rules), 0)} "
            f"| {fmt(statistics.median(r['compile_s'] for r in ok) * 1e3)} "
            f"| {fmt(sum(r['compile_s'] for r in ok), 2)} "
            f"| {fmt(statistics.median(r['mask_s'] for r in ok) * 1e3)} |"
        )
    return "\n".join(rows)


def _examples(records: list[dict], modes) -> str:
    """The first schema's greedy answers, one per mode."""
    first = records[0]["schema"]
    out = [f"Greedy answers for `{first}`:\n"]
    for mode in modes:
        for r in records:
            if r["schema"] == first and r["mode"] == mode and not r["sampled"]:
                out.append(f"* {mode}: `{json.dumps(r['text'])}` ({r['tokens']} tokens)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=20, help="schemas generated for")
    parser.add_argument("--seeds", type=int, default=2, help="sampled answers per schema+mode")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-schema-chars", type=int, default=700)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cost-limit", type=int, default=60, help="schemas compiled (0: none)")
    parser.add_argument("--model", default=None, help="default: the bundled SmolLM2")
    args = parser.parse_args(argv)

    modes = [m for m in args.modes.split(",") if m]
    model = cn.load_model(args.model)
    t0 = time.perf_counter()
    schemas = pick_schemas(args.data, args.limit, args.max_schema_chars, modes)
    print(f"# {len(schemas)} schemas, model {model.name} on {model.device}", file=sys.stderr)
    seeds = [args.seed + i for i in range(args.seeds)]
    records = generate_all(model, schemas, modes, seeds, args.max_tokens)
    costs = compile_costs(args.data, args.cost_limit, model.vocab) if args.cost_limit else []
    minutes = (time.perf_counter() - t0) / 60
    from_bench = sum(1 for name, _ in schemas if not name.startswith("schemas/"))
    parts = [
        f"Whitespace modes with {model.name} on {len(schemas)} schemas ({from_bench} "
        f"from JSONSchemaBench), {args.seeds} sampled answers (temperature 1, seeds "
        f"{seeds[0]}..{seeds[-1]}) and a greedy one per schema and mode, max {args.max_tokens} "
        f"tokens; {minutes:.0f} min in all.",
        _generation_table(records, modes),
        "Tokens, whitespace and seconds are means over all answers; the layout columns count "
        'the answers that finished ("stop").',
    ]
    if costs:
        parts += [
            f"Compile cost on {args.cost_limit} JSONSchemaBench schemas (round-robin over the "
            "subsets, any size; a failure is a schema over the 100,000-rule limit or the "
            "10 s compile timeout):",
            _cost_table(costs),
        ]
    parts.append(_examples(records, modes))
    emit(records + costs, "\n\n".join(parts), args, "bench/whitespace.py", argv)


if __name__ == "__main__":
    main()
