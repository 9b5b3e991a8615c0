"""``--kd`` like with like: each ``+kd`` start against the ``+kd`` references and its own plain start."""

from __future__ import annotations

from learngene.bench.findings import family
from learngene.bench.rows import Row
from learngene.comparison.report import size_table

REFS = ["scratch", "mimetic", "structured"]


def _rows(method: str, variant: str, base: float) -> list[Row]:
    # distinct, seed-dependent results: no two labels are one start by their results
    return [
        Row(
            method,
            "data",
            "L2-D32-H2",
            2,
            32,
            2,
            seed,
            variant=variant,
            accs=[base + 0.01 * seed**2 + 0.001 * len(method)],
        )
        for seed in range(3)
    ]


def _groups() -> dict[str, list[Row]]:
    groups = {}
    for i, method in enumerate([*REFS, "importance"]):
        groups[method] = _rows(method, "", 0.5 + 0.03 * i)
        groups[f"{method} +kd"] = _rows(method, "+kd", 0.45 + 0.05 * i)
    return groups


def test_a_kd_row_is_set_against_the_kd_references_and_its_plain_self_only():
    fam = family(_groups(), REFS, "L2-D32-H2")
    assert ("importance +kd", "structured +kd") in fam.verdicts and ("importance +kd", "importance") in fam.verdicts
    assert ("importance +kd", "structured") not in fam.verdicts and ("importance", "structured +kd") not in fam.verdicts
    assert fam.refs_of("importance +kd") == ["scratch +kd", "mimetic +kd", "structured +kd"]
    assert fam.refs_of("importance") == REFS
    # m: the plain references' 3 pairs and the +kd references' 3, importance against each of its 3 references, the
    # same for importance +kd, and each of the 4 +kd starts against its plain self
    assert fam.m == 3 + 3 + 3 + 3 + 4


def test_without_kd_references_a_variant_is_set_against_the_plain_references_as_before():
    groups = {k: v for k, v in _groups().items() if not (k.endswith("+kd") and k.split()[0] in REFS)}
    fam = family(groups, REFS, "L2-D32-H2")
    assert ("importance +kd", "structured") in fam.verdicts and not fam.plain
    assert fam.m == 3 + 3 + 3


def test_the_table_has_a_column_against_itself_without_kd():
    rows = [r for group in _groups().values() for r in group]
    table, _ = size_table(rows, "L2-D32-H2", REFS)
    header = table.splitlines()[0]
    assert "| vs structured +kd |" in header and "| vs itself without +kd |" in header
    kd_row = next(line for line in table.splitlines() if line.startswith("| importance +kd |"))
    cells = kd_row.strip("| ").split(" | ")
    names = header.strip("| ").split(" | ")
    assert cells[names.index("vs structured")] == "" and cells[names.index("vs structured +kd")] != ""
    assert cells[names.index("vs itself without +kd")] != ""
