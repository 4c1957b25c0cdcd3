"""User instances from CSV files: ``--skills FILE.csv`` and ``--costs FILE.csv``.

Both files have a header row and one row per expert; the first column names the expert:

    expert,code,math,chat          expert,usd,latency_s
    small,0.61,0.40,0.80           small,0.0002,0.4
    large,0.90,0.85,0.88           large,0.0100,2.1

Skills are the mean skill of each expert on each reward dimension, in [0, 1]; costs are the
cost of one call per named cost coordinate, finite and >= 0. Both files must list the same
experts (in any order; the skills file's order is kept). Errors name the file and line, as the
crowd loader's do (``DataFormatError``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from pathlib import Path

import numpy as np

from msroute._validation import COST_MAX, FloatArray, parse_decimal, quoted
from msroute.datasets.crowd import PathLike, decode_text
from msroute.errors import DataFormatError
from msroute.scenarios.base import Scenario, ScenarioInstance

__all__ = ["FILES", "file_digest", "files_scenario", "load_costs_csv", "load_skills_csv"]


#: The scenario name of user files (``msroute bench --skills ... --costs ...``).
FILES = "files"


def file_digest(path: PathLike) -> str:
    """SHA-256 of a file's bytes (recorded with results; a changed file is new data)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _read_table(
    path: PathLike, what: str, low: float, high: float
) -> tuple[tuple[str, ...], tuple[str, ...], FloatArray]:
    """Expert names, column names and the (K, columns) values of a CSV file."""
    source = os.fspath(path)
    text = decode_text(Path(source).read_bytes(), source, "a CSV file")  # OSError propagates
    rows = [(n, r) for n, r in _numbered_rows(text, source) if any(cell.strip() for cell in r)]
    if not rows:
        raise DataFormatError(f"{source} is empty: expected a header row 'expert,<{what}>...'")
    header_line, header = rows[0]
    columns = tuple(c.strip() for c in header[1:])
    if not columns:
        raise DataFormatError(
            f"{source}, line {header_line}: the header must name the expert column and at "
            f"least one {what} column, got {quoted(','.join(header))}"
        )
    seen: set[str] = set()
    for j, name in enumerate(columns):
        if not name:
            raise DataFormatError(f"{source}, line {header_line}: column {j + 2} has no name")
        if name in seen:
            raise DataFormatError(
                f"{source}, line {header_line}: column {quoted(name)} appears twice"
            )
        seen.add(name)
    if len(rows) < 2:
        raise DataFormatError(f"{source} has a header but no expert row")
    names: list[str] = []
    first_line: dict[str, int] = {}
    values = np.empty((len(rows) - 1, len(columns)))
    for r, (lineno, row) in enumerate(rows[1:]):
        if len(row) != len(columns) + 1:
            raise DataFormatError(
                f"{source}, line {lineno}: expected {len(columns) + 1} comma-separated fields "
                f"(expert and {', '.join(columns)}), got {len(row)}"
            )
        name = row[0].strip()
        if not name:
            raise DataFormatError(f"{source}, line {lineno}: the expert name is empty")
        if name in first_line:
            raise DataFormatError(
                f"{source}, line {lineno}: expert {quoted(name)} is listed again (first on line "
                f"{first_line[name]})"
            )
        first_line[name] = lineno
        names.append(name)
        for j, cell in enumerate(row[1:]):
            values[r, j] = _number(cell, source, lineno, columns[j], low, high)
    return tuple(names), columns, values


def _numbered_rows(text: str, source: str) -> list[tuple[int, list[str]]]:
    """CSV rows with the line each starts on."""
    reader = csv.reader(io.StringIO(text))
    out = []
    start = 1
    try:
        for row in reader:
            out.append((start, row))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataFormatError(f"{source}, line {reader.line_num}: {exc}") from None
    return out


def _number(cell: str, source: str, lineno: int, column: str, low: float, high: float) -> float:
    try:
        value = parse_decimal(cell)
    except ValueError:
        raise DataFormatError(
            f"{source}, line {lineno}: {column} must be a number, got {quoted(cell.strip())}"
        ) from None
    if not low <= value <= high:  # False for NaN too
        raise DataFormatError(
            f"{source}, line {lineno}: {column} == {quoted(cell.strip())} must be in "
            f"[{low:g}, {high:g}]"
        )
    return value


def load_skills_csv(path: PathLike) -> tuple[tuple[str, ...], tuple[str, ...], FloatArray]:
    """Read a skills file (rows experts, columns reward dimensions, values in [0, 1]).

    Returns
    -------
    experts : tuple of str, length K
    dims : tuple of str, length N
    skills : ndarray, shape (N, K)

    Raises
    ------
    DataFormatError
        Empty file, missing or repeated column names, a row with the wrong number of fields,
        an empty or repeated expert name, a value that is not a number in [0, 1]; the message
        names the file and line.
    """
    experts, dims, values = _read_table(path, "reward dimension", 0.0, 1.0)
    return experts, dims, np.ascontiguousarray(values.T)


def load_costs_csv(path: PathLike) -> tuple[tuple[str, ...], tuple[str, ...], FloatArray]:
    """Read a costs file (rows experts, one column per named cost, values in the range of
    costs, ``[0, 1e12]``: ``msroute._validation.COST_MAX``).

    Returns
    -------
    experts : tuple of str, length K
    cost_names : tuple of str, length d
    costs : ndarray, shape (K, d)

    Raises
    ------
    DataFormatError
        As ``load_skills_csv``, for values that are not numbers in ``[0, 1e12]``.
    """
    return _read_table(path, "cost", 0.0, COST_MAX)


def files_scenario(
    skills: str,
    costs: str,
    *,
    m_draws: int = 2,
    budget_cost: str | None = None,
    kappa: float = 20.0,
    sha256: str | None = None,
) -> Scenario:
    """A scenario from a skills file and a costs file (the same instance for every seed).

    Parameters
    ----------
    skills, costs : str
        Paths of the two CSV files (see the module docstring).
    m_draws : int, default 2
        M, draws per round.
    budget_cost : str, optional
        The cost column the budget bounds; default the first one.
    kappa : float, default 20
        Concentration of the stationary Beta environment around the skills.
    sha256 : str, optional
        Digest of the two files (``file_digest(skills) + file_digest(costs)``) the results
        were computed for; a mismatch means the files changed and raises.

    Raises
    ------
    DataFormatError
        A malformed file, experts that differ between the files, an unknown ``budget_cost``,
        or files that no longer match ``sha256``.
    """
    experts, _, v = load_skills_csv(skills)
    cost_experts, cost_names, c = load_costs_csv(costs)
    digest = file_digest(skills) + file_digest(costs)
    if sha256 is not None and sha256 != digest:
        raise DataFormatError(f"{skills} or {costs} changed since the results were started")
    missing = [e for e in experts if e not in cost_experts]
    extra = [e for e in cost_experts if e not in experts]
    if missing or extra:
        where = (
            f"{costs} has no row for {missing}" if missing else f"{skills} has no row for {extra}"
        )
        raise DataFormatError(f"the two files must list the same experts: {where}")
    order = [cost_experts.index(e) for e in experts]
    budget = cost_names[0] if budget_cost is None else budget_cost
    if budget not in cost_names:
        raise DataFormatError(
            f"budget cost {budget!r} is not a column of {costs} ({', '.join(cost_names)})"
        )
    inst = ScenarioInstance(
        skills_base=v, costs=c[order], cost_names=cost_names, expert_names=experts
    )
    return Scenario(
        name=FILES,
        title=f"{Path(skills).name} + {Path(costs).name}",
        make_instance=lambda _seed: inst,
        m_draws=m_draws,
        budget_cost=budget,
        budget_unit=f"{budget} per query",
        kappa=kappa,
        params=(
            ("skills", str(skills)),
            ("costs", str(costs)),
            ("m_draws", m_draws),
            ("budget_cost", budget),
            ("kappa", kappa),
            ("sha256", digest),
        ),
        notes=f"user files {skills} and {costs}",
    )
