"""Compiling the jit kernels' loops: never at import, only the loops a model uses, a log line
when a loop is compiled rather than loaded, and the cache where NUMBA_CACHE_DIR says, else
beside the package, else in the user's cache folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.paths import REPO


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, its kernels chosen by ``cpu_kernels`` alone (not by
    the GRAPHEXEC_CPU_KERNELS this suite may run under)."""
    environment = {name: value for name, value in os.environ.items() if name != "GRAPHEXEC_CPU_KERNELS"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                          env=environment, timeout=900)


def test_graphexec_and_an_engine_on_numpy_kernels_never_load_numba():
    done = run_python("""
        import sys
        import numpy as np
        import graphexec
        from graphexec import Engine
        engine = Engine.load("examples/models/wide.pnnx.param", cpu_kernels="numpy")
        engine.forward(np.load("examples/models/wide.io.npz")["in0"])
        print("numba" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_numba_jit_is_refused_and_auto_takes_numpy():
    done = run_python("""
        import sys
        sys.modules["numba"] = None  # as if the jit extra were not installed
        from graphexec import EngineOptions
        from graphexec.errors import OptionError
        print(EngineOptions().kernel_tiers())
        try:
            EngineOptions(cpu_kernels="jit").kernel_tiers()
        except OptionError as exc:
            print("refused:", exc)
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "('numpy',)" and lines[1].startswith("refused:") and "graphexec[jit]" in lines[1]


LOOP_MODULE = '''
from graphexec.devices.cpu.jit.compiler import loop

@loop
def twice(x):
    for i in range(x.shape[0]):
        x[i] *= 2
'''


def compile_a_loop(tmp_path, env: dict[str, str], in_tree: bool = True,
                   module: str = LOOP_MODULE) -> subprocess.CompletedProcess:
    """A small loop compiled in a fresh process (its module in ``tmp_path/src``), logging at
    INFO; ``in_tree=False`` makes its folder's __pycache__ unwritable, as in a read-only install."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "tiny_loops.py").write_text(module)
    return run_python(f"""
        import sys
        sys.path.insert(0, {str(source)!r})
        import graphexec  # before the logger is turned on: importing it turns its logs off
        from loguru import logger
        logger.remove(); logger.add(sys.stdout, level="INFO", format="{{message}}"); logger.enable("graphexec")
        from numba.core import caching
        if not {in_tree}:
            def unwritable(self):
                raise PermissionError("read-only")
            caching.InTreeCacheLocator.ensure_cache_path = unwritable
        import numpy as np
        import tiny_loops
        x = np.ones(4, np.float32)
        tiny_loops.twice(x)
        print(x.tolist(), tiny_loops.twice.stats.cache_hits)
    """, env)


def cached_files(folder) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))


def test_a_loop_is_cached_where_numba_cache_dir_says_and_logs_its_compile(tmp_path):
    pytest.importorskip("numba")
    cache = tmp_path / "cache"
    first = compile_a_loop(tmp_path, {"NUMBA_CACHE_DIR": str(cache)})
    assert first.returncode == 0, first.stderr
    assert "compiling CPU loop twice" in first.stdout and str(cache) in first.stdout
    assert cached_files(cache) and not (tmp_path / "src" / "__pycache__").exists()
    again = compile_a_loop(tmp_path, {"NUMBA_CACHE_DIR": str(cache)})
    assert again.returncode == 0, again.stderr
    assert "compiling" not in again.stdout  # loaded from the cache, silently
    assert "[2.0, 2.0, 2.0, 2.0]" in again.stdout


def test_a_loop_is_compiled_again_when_a_helper_in_another_loops_module_changes(tmp_path):
    """numba's own stamp looks at the loop's file alone: a loop that inlines a helper from
    another module of loops would load from the cache with the helper as it was."""
    pytest.importorskip("numba")
    source = tmp_path / "src"
    source.mkdir()
    helper = 'from graphexec.devices.cpu.jit.compiler import inline\n\n@inline\ndef factor():\n    return {}\n'
    (source / "_loops_helper.py").write_text(helper.format(2))
    loops = LOOP_MODULE.replace("x[i] *= 2", "x[i] *= factor()").replace(
        "from graphexec.devices.cpu.jit.compiler import loop", "from graphexec.devices.cpu.jit.compiler import loop\n"
        "from _loops_helper import factor")
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = compile_a_loop(tmp_path, env, module=loops)
    assert first.returncode == 0, first.stderr
    assert "[2.0, 2.0, 2.0, 2.0]" in first.stdout
    (source / "_loops_helper.py").write_text(helper.format(3) + "# changed\n")
    again = compile_a_loop(tmp_path, env, module=loops)
    assert again.returncode == 0, again.stderr
    assert "[3.0, 3.0, 3.0, 3.0]" in again.stdout and "compiling CPU loop twice" in again.stdout


def test_a_loop_is_cached_beside_its_module_else_in_the_users_cache_folder(tmp_path):
    pytest.importorskip("numba")
    env = {"NUMBA_CACHE_DIR": "", "XDG_CACHE_HOME": str(tmp_path / "home-cache")}
    beside = compile_a_loop(tmp_path, env)
    assert beside.returncode == 0, beside.stderr
    assert cached_files(tmp_path / "src" / "__pycache__")
    user = compile_a_loop(tmp_path, env, in_tree=False)
    assert user.returncode == 0, user.stderr
    assert cached_files(tmp_path / "home-cache" / "graphexec" / "numba")
    assert "compiling CPU loop twice" in user.stdout


def test_an_engine_prepares_only_the_loops_its_model_uses():
    pytest.importorskip("numba")
    done = run_python("""
        import numpy as np
        from graphexec import Engine
        from graphexec.devices.cpu.jit import compiler
        Engine.load("examples/models/wide.pnnx.param", cpu_kernels="jit")  # convolutions and ReLUs only
        print(" ".join(sorted({r.name for r in compiler.READIED})))
    """)
    assert done.returncode == 0, done.stderr
    readied = set(done.stdout.split())
    # its convolutions' and Linear's loops (im2col, Winograd, alone or with their products;
    # whole or in parts), the sums' and the activations', and the one that finds numba's
    # threads to place them: no depthwise, pooling or exp loops
    convolutions = {"im2col", "winograd_input", "winograd_output", "im2col_rows", "im2col_whole", "im2col_parts",
                    "winograd_rows", "winograd_parts", "pointwise_whole", "pointwise_parts",
                    "winograd_channels_whole", "winograd_channels_parts", "im2col_channels_whole",
                    "im2col_channels_parts"}
    linear = {"linear_whole", "linear_parts"}
    assert readied and readied <= convolutions | linear | {"activate_rows", "activate_rows_parts", "add_into", "add_parts",
                                                           "thread_ids"}
