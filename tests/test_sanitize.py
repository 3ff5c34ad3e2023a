"""The sanitizer driver's parts that need no GPU: kernels, command lines, parsing.

The sample outputs follow the record format of NVIDIA's compute-sanitizer
documentation (memcheck, racecheck, initcheck and synccheck examples), with
the driver's own marker lines between kernels as its child prints them.
"""

from __future__ import annotations

import sys

import pytest

from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.testing import sanitize

MEMCHECK = """\
========= COMPUTE-SANITIZER
@@tilelab-sanitize kernel vector_add
vector_add: check passed
@@tilelab-sanitize kernel gemm
========= Invalid __global__ write of size 4 bytes
=========     at unaligned_kernel()+0x20 in memcheck_demo.cu:6
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f6510c00001 is misaligned
=========
========= Invalid __global__ read of size 4 bytes
=========     at out_of_bounds_kernel()+0x60 in memcheck_demo.cu:11
=========     by thread (7,0,0) in block (0,0,0)
=========     Address 0x87654320 is out of bounds
=========
@@tilelab-sanitize failed gemm CudaError: an illegal memory access was encountered
@@tilelab-sanitize kernel softmax
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========     Host Frame: [0x2d3d6a] in libcuda.so.1
=========
@@tilelab-sanitize done
========= ERROR SUMMARY: 3 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
@@tilelab-sanitize kernel transpose_two_tiles
========= Error: Race reported between Write access at 0x1b0 in transpose.cu:27:transpose(float *, float *)
=========     and Read access at 0x220 in transpose.cu:31:transpose(float *, float *) [790528 hazards]
=========
========= Warning: Race reported between Read access at 0x30 in k.cu:5:k(int *)
=========     and Write access at 0x50 in k.cu:6:k(int *) [32 hazards]
=========
@@tilelab-sanitize kernel row_sum
@@tilelab-sanitize done
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

INITCHECK = """\
========= COMPUTE-SANITIZER
@@tilelab-sanitize kernel 0_3
========= Uninitialized __global__ memory read of size 4 bytes
=========     at 0x70 in /tmp/k.cu:12:kernel
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f0f3e000c00
=========
@@tilelab-sanitize done
========= ERROR SUMMARY: 1 error
"""

CLEAN = """\
========= COMPUTE-SANITIZER
@@tilelab-sanitize kernel layer_norm
layer_norm: check passed
@@tilelab-sanitize kernel rms_norm
@@tilelab-sanitize done
========= ERROR SUMMARY: 0 errors
"""


def test_parse_memcheck_charges_each_record_to_its_kernel():
    run = sanitize.parse(MEMCHECK, "memcheck")
    assert run.count == 3 and run.summary_total == 3
    assert run.by_kernel() == {"gemm": 2, "softmax": 1}
    assert run.reports[0].title == "Invalid __global__ write of size 4 bytes"
    assert run.reports[0].details[0] == "at unaligned_kernel()+0x20 in memcheck_demo.cu:6"
    assert run.reports[2].title.startswith("Program hit cudaErrorLaunchFailure")
    assert run.started == ["vector_add", "gemm", "softmax"]
    assert run.failed == {"gemm": "CudaError: an illegal memory access was encountered"}
    assert run.finished


def test_parse_racecheck_initcheck_and_a_clean_run():
    race = sanitize.parse(RACECHECK, "racecheck")
    assert race.count == 2 and race.by_kernel() == {"transpose_two_tiles": 2}
    assert "[790528 hazards]" in race.reports[0].text[1]
    init = sanitize.parse(INITCHECK, "initcheck")
    assert init.count == 1 and init.by_kernel() == {"0_3": 1}
    assert init.reports[0].details[0] == "at 0x70 in /tmp/k.cu:12:kernel"
    clean = sanitize.parse(CLEAN, "synccheck")
    assert clean.count == 0 and clean.finished and clean.started == ["layer_norm", "rms_norm"]


def test_a_hazard_record_keeps_both_accesses():
    """`--racecheck-report all` prints each hazard with the two threads and instructions;
    the summary shows them (an offset in the kernel, to find in `nvdisasm` of the cubin)."""
    text = ("@@tilelab-sanitize kernel fa\n"
            "========= Error: Potential RAW hazard detected at __shared__ 0x16a20 in block "
            "(1,0,0) :\n"
            "=========     Write Thread (193,0,0) at kernel_kernel+0x3a40\n"
            "=========     Read Thread (70,0,0) at kernel_kernel+0x4240\n"
            "=========     Current Value : 0, Incoming Value : 0\n=========\n"
            "@@tilelab-sanitize done\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    run = sanitize.parse(text, "racecheck")
    assert run.count == 1 and run.by_kernel() == {"fa": 1}
    assert run.reports[0].title.startswith("Error: Potential RAW hazard")
    assert run.reports[0].details[:2] == ["Write Thread (193,0,0) at kernel_kernel+0x3a40",
                                          "Read Thread (70,0,0) at kernel_kernel+0x4240"]


def test_parse_counts_records_past_the_print_limit_from_the_summary():
    shown = "@@tilelab-sanitize kernel k\n========= Invalid __shared__ read of size 4 bytes\n" \
            "=========     at k+0x10 in k.cu:3\n=========\n========= ERROR SUMMARY: 500 errors\n"
    run = sanitize.parse(shown, "memcheck")
    assert len(run.reports) == 1 and run.count == 500


def test_racecheck_summary_counts_hazards_past_the_print_limit():
    """racecheck's summary says how many it displayed and, in brackets, how many it found."""
    text = ("@@tilelab-sanitize kernel fa\n"
            "========= Error: Potential RAW hazard detected at __shared__ 0x10 in block (0,0,0) :\n"
            "=========     Write Thread (128,0,0) at kernel_kernel+0x36b0\n=========\n"
            "@@tilelab-sanitize done\n"
            "========= RACECHECK SUMMARY: 30 hazards displayed (2049 errors, 3 warnings)\n")
    run = sanitize.parse(text, "racecheck")
    assert len(run.reports) == 1 and run.count == 2052


HAZARD = ("========= Error: Potential RAW hazard detected at __shared__ 0x14800 in block "
          "(4,3,0) :\n=========     Write Thread (128,0,0) at kernel_kernel+0x36b0\n"
          "=========     Read Thread (0,0,0) at kernel_kernel+0x3f70\n=========\n")


@pytest.mark.parametrize("tool, hazards_in, code, summary", [
    ("racecheck", "fa_turns", 0, "racecheck 0 (+2 in kernels handing turns over with bar.arrive)"),
    ("racecheck", "softmax", 1, "racecheck 2 reports"),
    ("memcheck", "fa_turns", 1, "memcheck 2 reports"),
])
def test_racecheck_reports_in_kernels_handing_turns_over_are_counted_apart(
        monkeypatch, capsys, tool, hazards_in, code, summary):
    """racecheck loses a barrier's order after bar.arrive (scripts/racecheck_bar_arrive.cu):
    its reports in a kernel the child marks `hands-over` are counted apart and pass; the
    same records in another kernel, or from another tool, fail the run."""
    import subprocess

    def fake_run(command, **_):
        out = ""
        for name in command[command.index("--names") + 1].split(","):
            out += f"@@tilelab-sanitize kernel {name}\n"
            out += HAZARD * 2 if name == hazards_in else ""
            out += "@@tilelab-sanitize hands-over fa_turns\n" if name == "fa_turns" else ""
        return subprocess.CompletedProcess(command, 0, out + "@@tilelab-sanitize done\n", "")

    monkeypatch.setattr(sanitize.subprocess, "run", fake_run)
    monkeypatch.setattr(sanitize, "list_kernels", lambda *_: {"suite": ["fa_turns", "softmax"]})
    assert sanitize.main(["--tools", tool, "--sanitizer", sys.executable]) == code
    out = capsys.readouterr().out
    assert summary in out.splitlines()[-1], out
    assert ("counted apart" in out) == (code == 0), out


def test_driver_entry_point_probes_are_not_kernel_errors():
    """PyTorch asks the driver for entry points it may lack; memcheck reports each call."""
    probe = ('========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not '
             'found" on CUDA API call to cuGetProcAddress_v2.\n'
             "=========     Saved host backtrace up to driver entry point at error\n"
             "=========         Host Frame: [0x2f1a3] in libcuda.so.1\n=========\n")
    text = (probe * 2 + "@@tilelab-sanitize kernel k\n" + probe
            + "========= Invalid __shared__ write of size 16 bytes\n"
            "=========     at k+0x10 in k.cu:3\n=========\n@@tilelab-sanitize done\n"
            "========= ERROR SUMMARY: 4 errors\n")
    run = sanitize.parse(text, "memcheck")
    assert run.probes == 3 and run.count == 1 and run.by_kernel() == {"k": 1}


def test_kernels_after_a_lost_cuda_context_run_in_a_new_child(monkeypatch):
    """An illegal access leaves the child's CUDA context unusable: the kernels after it are
    judged again in a fresh child, not charged with the first one's failure."""
    import subprocess

    calls = []

    def child(names, lines):
        out = "".join(f"@@tilelab-sanitize kernel {n}\n" + lines.get(n, "") for n in names)
        return out + "@@tilelab-sanitize done\n========= ERROR SUMMARY: 9 errors\n"

    def fake_run(command, **_):
        names = command[command.index("--names") + 1].split(",")
        calls.append(names)
        lost = "@@tilelab-sanitize failed {} CudaError: an illegal memory access was " \
               "encountered\n"
        lines = {} if len(calls) > 1 else {
            "b": "========= Invalid __global__ write of size 4 bytes\n=========\n" +
                 lost.format("b"),
            "c": lost.format("c")}
        return subprocess.CompletedProcess(command, 0, child(names, lines), "")

    monkeypatch.setattr(sanitize.subprocess, "run", fake_run)
    run = sanitize.run_tool("memcheck", {"generated": ["a", "b", "c", "d"]}, "cs", 10)
    assert calls == [["a", "b", "c", "d"], ["c", "d"]]
    assert list(run.failed) == ["b"] and run.by_kernel() == {"b": 1}
    assert run.started == ["a", "b", "c", "d"] and run.finished


def test_each_group_counts_its_own_kernels(monkeypatch, capsys):
    """The examples and the suite both have a `gemm_bias_relu`: each group's line counts the
    kernels its own child ran (a run printed "3/2 kernels" for the suite)."""
    import subprocess

    def fake_run(command, **_):
        names = command[command.index("--names") + 1].split(",")
        out = "".join(f"@@tilelab-sanitize kernel {n}\n" for n in names)
        return subprocess.CompletedProcess(command, 0, out + "@@tilelab-sanitize done\n", "")

    monkeypatch.setattr(sanitize.subprocess, "run", fake_run)
    sanitize.run_tool("racecheck", {"examples": ["gemm", "gemm_bias_relu", "softmax"],
                                    "suite": ["gemm_fp16", "gemm_bias_relu"]}, "cs", 10)
    lines = capsys.readouterr().out.splitlines()
    assert "3/3 kernels" in lines[0] and "2/2 kernels" in lines[1], lines


def test_a_child_that_stops_early_is_not_finished():
    run = sanitize.parse("@@tilelab-sanitize kernel gemm\nSegmentation fault\n", "memcheck")
    assert not run.finished and run.started == ["gemm"] and run.count == 0


def test_kernel_lists():
    kernels = sanitize.list_kernels(seed=3, programs=4)
    assert {"vector_add", "gemm", "softmax", "flash_attention", "layer_norm"} <= \
        set(kernels["examples"])
    assert "common" not in kernels["examples"]
    assert {"vector_add", "gemm_bf16", "atomic_column_sum", "softmax_tail"} <= \
        set(kernels["suite"])
    assert kernels["generated"] == ["3_0", "3_1", "3_2", "3_3"]


def test_command_lines():
    command = sanitize.sanitizer_command("racecheck", "suite", ["gemm_fp16", "softmax"],
                                         sanitizer="/cs", python="/py")
    assert command[:3] == ["/cs", "--tool", "racecheck"]
    assert command[-7:] == ["/py", "-m", "tilelab.testing.sanitize", "--child", "suite",
                            "--names", "gemm_fp16,softmax"]
    with pytest.raises(ValueError, match="unknown tool"):
        sanitize.sanitizer_command("leakcheck", "suite", ["x"])


def test_list_mode_prints_every_command(capsys):
    assert sanitize.main(["--list", "--tools", "memcheck,initcheck", "--programs", "2",
                          "--sanitizer", "/cs"]) == 0
    out = capsys.readouterr().out
    assert out.count("/cs --tool memcheck") == 3 and out.count("/cs --tool initcheck") == 3
    assert f"{sys.executable} -m tilelab.testing.sanitize --child generated --names 0_0,0_1" \
        in out


def test_missing_sanitizer_is_reported(capsys):
    assert sanitize.main(["--tools", "memcheck", "--sanitizer", "/nonexistent/cs"]) == 2
    assert "compute-sanitizer not found" in capsys.readouterr().out


def test_artifacts_mode_runs_the_exported_checks(tmp_path, monkeypatch, capsys):
    """`--artifacts`: the suite's checks from bench/artifacts/suite, one child group, and
    a clear error where none were exported."""
    monkeypatch.syspath_prepend(str(sanitize.ROOT))
    from bench import gpu_suite

    monkeypatch.setattr(gpu_suite, "ARTIFACTS", tmp_path)
    with pytest.raises(SystemExit):
        sanitize.main(["--artifacts", "--list"])
    assert "gpu_suite.py build" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(
        '{"checks": [{"name": "softmax"}, {"name": "gemm_fp16"}], "bench": []}')
    assert sanitize.main(["--artifacts", "--list", "--tools", "racecheck",
                          "--sanitizer", "/cs"]) == 0
    out = capsys.readouterr().out
    assert "artifacts: softmax, gemm_fp16" in out
    assert out.count("/cs --tool racecheck") == 1
    assert "--child artifacts --names softmax,gemm_fp16" in out


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_the_bar_arrive_probe_compiles(tmp_path):
    """scripts/racecheck_bar_arrive.cu, the evidence for counting apart, builds for sm_90a
    (it runs on a GPU: `compute-sanitizer --tool racecheck` over its four variants)."""
    import subprocess

    probe = sanitize.ROOT / "scripts" / "racecheck_bar_arrive.cu"
    done = subprocess.run([find_nvcc(), "-arch=sm_90a", "-cubin", "-o",
                           str(tmp_path / "probe.cubin"), str(probe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "probe.cubin").stat().st_size > 0


def test_an_examples_kernels_are_looked_at_for_hands_over(monkeypatch, capsys):
    """The child marks an example `hands-over` by the code of the kernels its check compiled
    (found in the caches of the example's jitted functions), as it marks a suite check."""
    import torch

    import examples.vector_add as example
    from tilelab.kernel import Kernel

    check = example.check
    monkeypatch.setattr(example, "check", lambda device: check("cpu"))
    kernels = sanitize._run_example("vector_add")
    assert kernels and all(isinstance(k, Kernel) for k in kernels)
    assert set(map(id, kernels)) == set(map(id, example.vector_add_kernel.compiled))

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    source = Kernel.get_kernel_source
    for marked in (False, True):
        turns = "\ntl::turn_pass();" if marked else ""
        monkeypatch.setattr(Kernel, "get_kernel_source", lambda self, turns=turns: source(self) + turns)
        assert sanitize.child("examples", ["vector_add"]) == 0
        out = capsys.readouterr().out
        assert ("hands-over vector_add" in out) == marked, out
        assert "failed" not in out, out
