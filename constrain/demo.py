"""`make demo`: constrained generation with the bundled SmolLM2-135M-Instruct, offline.

Prints a JSON object generated under a constraint and validated against its JSON Schema (the
example schemas/person.json), a line generated under a regex, the answer to a multiple-choice
question, a SQL query generated under the library's SQL grammar, and timings.
"""

from __future__ import annotations

import json
import re
import time

import jsonschema

import constrain as cn

DATE_REGEX = r"(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
CHOICES = ["Paris", "London", "Berlin", "Madrid"]


def _timing(out: cn.GenerationResult) -> str:
    s = out.stats
    return (
        f"{len(out.tokens)} tokens, prefill {s.prefill_s * 1000:.0f} ms, "
        f"{s.tokens_per_s:.1f} tok/s, constraint {s.constraint_s * 1000:.1f} ms total, "
        f"finish={out.finish_reason}"
    )


def main() -> None:
    t0 = time.perf_counter()
    model = cn.load_model()
    print(f"model: {model.name} on {model.device} (loaded in {time.perf_counter() - t0:.1f} s)\n")

    person = cn.schemas.load("person")
    out = cn.generate(
        model,
        "Invent a fictional person and describe them as JSON with name, age and city.",
        schema=person,
        schema_options={"whitespace": "default"},
        max_tokens=80,
        seed=1,
    )
    jsonschema.validate(out.value, person)
    print("JSON object (valid against its schema, schemas/person.json):")
    print(json.dumps(out.value))
    print(f"  [{_timing(out)}]\n")

    out = cn.generate(
        model,
        "When did the Apollo 11 Moon landing happen? Answer with a date.",
        regex=DATE_REGEX,
        max_tokens=20,
        greedy=True,
    )
    assert re.fullmatch(DATE_REGEX, out.text)
    print(f"regex:  {DATE_REGEX}")
    print(f"output: {out.text}")
    print(f"  [{_timing(out)}]\n")

    out = cn.generate(
        model, "What is the capital of France? Answer with one word.", choices=CHOICES, greedy=True
    )
    assert out.text in CHOICES
    print(f"question: What is the capital of France?  choices: {CHOICES}")
    print(f"answer:   {out.text}")
    print(f"  [{_timing(out)}]\n")

    question = (
        "Write a SQL query: the names of the employees (table employees with columns name, "
        "salary, department) in the sales department who earn more than 50000."
    )
    out = cn.generate(model, question, grammar="sql", max_tokens=60, greedy=True)
    assert cn.grammars.load("sql").matches(out.text) or not out.complete
    print(f"question: {question}")
    print("grammar:  sql (grammars/sql.lark, a SELECT subset)")
    print(f"query:    {out.text}")
    print(f"  [{_timing(out)}, the query is {'complete' if out.complete else 'cut by max_tokens'}]")


if __name__ == "__main__":
    main()
