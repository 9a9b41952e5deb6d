"""The mutation gate's arithmetic (mutation/mutate.py): a fresh seed per run, and two kill rates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

MUTATE = Path(__file__).resolve().parent.parent / "mutation" / "mutate.py"


def _mutate() -> Any:
    spec = importlib.util.spec_from_file_location("packrt_mutate", MUTATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("packrt_mutate", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mutate = _mutate()


def test_a_given_seed_is_kept_and_none_draws_a_fresh_one() -> None:
    assert mutate.draw_seed(3303) == 3303
    assert len({mutate.draw_seed(None) for _ in range(8)}) > 1, "each run without --seed samples anew"


def test_both_rates_leave_out_equivalents_and_only_the_contract_rate_leaves_out_outside_survivors() -> None:
    entries = [
        *({"outcome": "killed"} for _ in range(6)),
        {"outcome": "timeout"},
        {"outcome": "equivalent"},
        {"outcome": "not-run"},
        {"outcome": "survived", "classified": "outside the contract: a message"},
        {"outcome": "survived", "classified": "device only: cuda.default-first-device"},
        {"outcome": "survived"},
    ]
    rate, decided, contract_rate, relevant = mutate.kill_rates(entries)
    assert (decided, relevant) == (10, 9)
    assert (rate, contract_rate) == (7 / 10, 7 / 9)


def test_every_classification_table_is_read_by_id() -> None:
    for table in ("mutant", "device_only", "outside_contract"):
        records = mutate.load_equivalent(table=table)
        assert all(len(mid) == 12 and reason for mid, reason in records.items()), table
    assert mutate.load_equivalent(table="mutant"), "the reviewed equivalents are on file"


def test_records_that_name_no_current_site_are_reported_stale(tmp_path: Path) -> None:
    sites = [mutate.Site("aaaaaaaaaaaa", "packrt_core/nn/module.py", 1, "f", "compare", "a", "b", 0)]
    table = tmp_path / "equivalent.toml"
    table.write_text(
        '[[mutant]]\nid = "aaaaaaaaaaaa"\nreason = "kept"\n\n'
        '[[outside_contract]]\nid = "bbbbbbbbbbbb"\nreason = "its code moved"\n',
        encoding="utf-8",
    )
    assert mutate.stale_ids(sites, table) == ["bbbbbbbbbbbb"]
    assert mutate.stale_ids(sites, tmp_path / "absent.toml") == []
