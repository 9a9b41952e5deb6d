"""Cold start: ``import packrt`` compiles nothing, ``packrt warmup`` fills the kernel cache a fresh process
then only loads from, and the first forward leaves the caller's OpenMP (torch) thread count alone.

Every case runs in a fresh interpreter: what is compiled, cached or started happens once per process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_IMPORTS = "import packrt, packrt.models, packrt.nn, packrt.io, packrt.cli"


def _python(code: str, env: dict[str, str] | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _last_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, f"the child process failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_packrt_does_not_import_numba() -> None:
    """numba (and with it every kernel compilation) waits for the first kernel call, not the import."""
    loaded = _last_json(_python(f"import json, sys\n{_IMPORTS}\nprint(json.dumps('numba' in sys.modules))"))
    assert loaded is False, "importing packrt imported numba: import time now pays numba's start-up"


def test_importing_packrt_compiles_no_kernel_when_numba_is_already_loaded() -> None:
    """With numba imported first (another library used it), importing packrt still compiles nothing:
    numba's compile events, recorded around the import, are none."""
    code = textwrap.dedent(
        f"""
        import json
        from numba.core import event
        with event.install_recorder("numba:compile") as recorder:
            {_IMPORTS}
        print(json.dumps(len(recorder.buffer)))
        """
    )
    assert _last_json(_python(code)) == 0, "importing packrt compiled numba functions"


def test_import_packrt_imports_none_of_ml_dtypes_numba_llvmlite() -> None:
    """``import packrt`` stays light: python's own import log (``-X importtime``) names none of ml_dtypes,
    numba or llvmlite; each waits for the first bfloat16 value or kernel call."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import packrt"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "packrt" in imported, "the import log is empty: -X importtime wrote nothing to read"
    heavy = sorted(name for name in imported if name.split(".")[0] in {"ml_dtypes", "numba", "llvmlite"})
    assert heavy == [], f"import packrt imported {heavy}: they should load on first use"


def test_bfloat16_works_once_ml_dtypes_loads_on_first_use() -> None:
    """packrt.bfloat16 exists before ml_dtypes is imported; its first use loads it, and it is then
    ml_dtypes' dtype: a tensor round-trips through it and a numpy bfloat16 array reads back as packrt.bfloat16."""
    code = textwrap.dedent(
        """
        import json, sys
        import packrt
        before = "ml_dtypes" in sys.modules
        t = packrt.tensor([1.5, -2.25, 3.0]).to(packrt.bfloat16)
        import ml_dtypes, numpy as np
        print(json.dumps([
            before,
            str(t.dtype),
            t.to(packrt.float32).tolist(),
            packrt.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16),
            packrt.from_numpy(np.ones(2, dtype=ml_dtypes.bfloat16)).dtype is packrt.bfloat16,
        ]))
        """
    )
    assert _last_json(_python(code)) == [False, "packrt.bfloat16", [1.5, -2.25, 3.0], True, True]


@pytest.fixture(scope="module")
def tiny_bert(transformers: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 1-layer BERT directory (hidden 32, 64 positions)."""
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("tiny-bert")
    transformers.BertModel(config, add_pooling_layer=False).save_pretrained(directory)
    return directory


_COUNTS = re.compile(r"(\d+) kernel signatures compiled and cached, (\d+) loaded from the cache")


def _warmup(directory: Path, cache: Path, *extra: str) -> tuple[int, int, str]:
    done = _python(
        "import sys; from packrt.cli import main; sys.exit(main(sys.argv[1:]))",
        {"PACKRT_CACHE_DIR": str(cache), "NUMBA_CACHE_DIR": ""},
        "warmup",
        str(directory),
        *extra,
    )
    assert done.returncode == 0, f"packrt warmup failed:\n{done.stderr[-3000:]}"
    found = _COUNTS.search(done.stdout)
    assert found, f"packrt warmup printed no kernel counts: {done.stdout!r}"
    return int(found[1]), int(found[2]), done.stdout


@pytest.mark.skipif(
    os.environ.get("PACKRT_NUMBA") == "0", reason="PACKRT_NUMBA=0: the numpy kernels, nothing to compile or cache"
)
def test_warmup_compiles_into_the_cache_and_a_second_process_only_loads(tiny_bert: Path, tmp_path: Path) -> None:
    """The first warmup compiles and writes packrt's kernel cache (PACKRT_CACHE_DIR); a fresh process
    running the same model then compiles nothing and loads every signature from that cache."""
    cache = tmp_path / "cache"
    compiled, _, out = _warmup(tiny_bert, cache, "--shape", "1x8", "--shape", "8x64")
    assert compiled > 0, f"an empty cache, yet warmup compiled nothing: {out!r}"
    assert str(cache / "numba") in out, f"warmup does not name the cache it filled: {out!r}"
    assert any((cache / "numba").rglob("*.nbi")), f"no numba index was written under {cache / 'numba'}"
    again, loaded, out = _warmup(tiny_bert, cache, "--shape", "1x8", "--shape", "8x64")
    assert (again, loaded > 0) == (0, True), f"a warm cache, yet the second warmup compiled {again}: {out!r}"


def test_warmup_refuses_a_shape_that_is_not_batch_x_seq(tiny_bert: Path, tmp_path: Path) -> None:
    done = _python(
        "import sys; from packrt.cli import main; sys.exit(main(sys.argv[1:]))",
        {"PACKRT_CACHE_DIR": str(tmp_path)},
        "warmup",
        str(tiny_bert),
        "--shape",
        "8by64",
    )
    assert done.returncode == 2, f"exit {done.returncode}, stderr {done.stderr!r}"
    assert "--shape" in done.stderr and "'8by64'" in done.stderr and "BATCHxSEQ" in done.stderr, done.stderr


def test_warmup_of_a_missing_directory_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    done = _python(
        "import sys; from packrt.cli import main; sys.exit(main(sys.argv[1:]))",
        {"PACKRT_CACHE_DIR": str(tmp_path)},
        "warmup",
        str(missing),
    )
    assert done.returncode == 2, f"exit {done.returncode}, stderr {done.stderr!r}"
    assert str(missing) in done.stderr and "config.json" in done.stderr, done.stderr


def test_first_forward_leaves_torchs_thread_count_alone(torch: ModuleType, tiny_bert: Path) -> None:
    """numba starts its OpenMP pool with the core count as the OpenMP default; torch (one libgomp with
    numba here) must keep the one thread it was given through packrt's first forward."""
    code = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np, torch
        import packrt
        from packrt.models import from_pretrained
        torch.set_num_threads(1)
        packrt.set_num_threads(1)
        model = from_pretrained({str(tiny_bert)!r})
        model(packrt.from_numpy(np.ones((1, 8), np.int64)))
        print(json.dumps(torch.get_num_threads()))
        """
    )
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: numba's pool holds one thread and cannot change torch's count")
    count = _last_json(_python(code))
    assert count == 1, f"torch.set_num_threads(1), then packrt's first forward: torch now uses {count} threads"
