"""The `[[phase]]` tables: the schedule's steps, and the `with` chains that make them overlap.

Apart from `model` because the chain checks (loops, two GPU steps at once) are a job of their own.
"""

from __future__ import annotations

from runner.campaign.field_reader import FieldReader
from runner.campaign.objects import PHASE_KEYS, PHASE_USES, Phase


def read_phases(reader: FieldReader, variant_names: set[str]) -> tuple[Phase, ...]:
    """The [[phase]] tables, with `with` chains checked: no loop, one GPU phase per chain."""
    t = "phase"
    out: list[Phase] = []
    for i, tbl in enumerate(reader.array(t)):
        reader.check_keys(tbl, PHASE_KEYS, t, i)
        name = reader.get(tbl, "name", str, t, i, required=True)
        if any(p.name == name for p in out):
            raise reader.fail(f"{name!r} is declared twice", t, i, "name")
        variants = reader.str_list(tbl, "variants", t, i) or ()
        for n, v in enumerate(variants):
            if v not in variant_names:
                raise reader.fail(f"names variant {v!r}, which is not declared", t, i, "variants")
            if v in variants[:n]:
                raise reader.fail(f"names variant {v!r} twice", t, i, "variants")
        hours = reader.positive(tbl, "hours", t, i)
        if hours is None and not variants:
            raise reader.fail("a phase needs hours, or variants to run", t, i, "hours")
        uses = reader.get(tbl, "uses", str, t, i, default="gpu")
        if uses not in PHASE_USES:
            raise reader.fail(f"{uses!r} is not one of {', '.join(PHASE_USES)}", t, i, "uses")
        if variants and uses != "gpu":
            raise reader.fail("a phase that runs variants uses the GPUs", t, i, "uses")
        before = reader.get(tbl, "before_window", bool, t, i, default=False)
        if before and uses != "human":
            raise reader.fail("only human preparation can happen before the window", t, i, "before_window")
        out.append(
            Phase(
                name=name,
                uses=uses,
                hours=hours,
                variants=variants,
                with_=reader.get(tbl, "with", str, t, i),
                before_window=before,
            )
        )
    by_name = {p.name: p for p in out}
    for i, p in enumerate(out):
        if p.with_ is None:
            continue
        other = by_name.get(p.with_)
        if other is None or other is p:
            raise reader.fail(f"names phase {p.with_!r}, which is not another declared phase", t, i, "with")
        if p.before_window != other.before_window:
            raise reader.fail("preparation before the window cannot overlap a phase inside it", t, i, "with")
    # `with` chains (A with B with C) share one start: no loop, and at most one GPU phase in a chain
    gpu_in_chain: dict[str, int] = {}
    for i, p in enumerate(out):
        chain, q = [p.name], p
        while q.with_ is not None:
            q = by_name[q.with_]
            if q.name in chain:
                raise reader.fail("`with` goes round in a loop: " + " -> ".join(chain + [q.name]), t, i, "with")
            chain.append(q.name)
        if p.uses == "gpu":
            j = gpu_in_chain.setdefault(q.name, i)
            if j != i:
                blame = i if p.with_ is not None else j
                raise reader.fail(
                    f"{out[j].name!r} and {p.name!r} both need the GPUs and overlap through "
                    "`with`: two steps on the same GPU run one after the other",
                    t,
                    blame,
                    "with",
                )
    return tuple(out)
