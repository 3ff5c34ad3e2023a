"""FlashAttention's turns with no drain inside: a hand transformation of the generated CUDA.

    python bench/fa_turn_rotation.py OUT.json default,no_traps,turn_rotated,...

The default FlashAttention d128 (128x128 tiles, two consumer warpgroups taking turns at
the tensor cores) holds, in one warpgroup's turn, O += P V of key tile k, a wait for it,
then S = Q Kᵀ of tile k+1: the tensor cores may drain between the two. `turn_rotated`
rewrites the consumers' loop in the CUDA source before nvcc, from `S(k); softmax(k);
P V(k)` to `softmax(k); P V(k); S(k+1)`, with S(0) before the loop and the last softmax
and P V after it: within a turn the two products are issued back to back,
`wgmma.wait_group 1` then waits for P V (its slot released), `wait_group 0` for S. It
also drops the alignment traps (ptxas serializes every MMA when a trap's branch stands
between an MMA and its wait), so `no_traps` - the traps dropped alone - is its control;
`default` is the source as generated. Each named variant is compiled here, checked on
tails and timed beside SDPA (bench/fa_variants.py's `measure`), in the order given.

An experiment, not a lowering: it measured no gain (docs/PERFORMANCE.md), and the
alignment traps have gone from the compiler since (passes/aligned_tiles_once.py).
"""

import json
import os
import re
import sys
from pathlib import Path

os.environ["TILELAB_DISABLE_CACHE"] = "1"  # the variants compile the same programs
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench.fa_variants as fa_variants  # noqa: E402
import tilelab.backends.cuda.nvcc as nvcc  # noqa: E402


def strip_traps(source: str) -> str:
    return "\n".join(line for line in source.split("\n") if "wgmma_check_aligned" not in line)


def rotate_turns(source: str) -> str:
    """The consumers' loop rotated as the module doc says; a source of another shape (a
    kernel without turns) is returned as it was."""
    lines = source.split("\n")

    def find(test, start=0):
        return next((i for i in range(start, len(lines)) if test(lines[i])), None)

    loop = find(lambda s: re.search(r"for \(int key_block = 0; key_block < \d+; ", s))
    if loop is None or "turn_first" not in source:
        return source
    n = int(re.search(r"key_block < (\d+)", lines[loop])[1])
    wait_full = find(lambda s: "tl::mbar_wait(" in s, loop)
    first_turn = find(lambda s: "if (key_block == 0)" in s, loop)
    handed = find(lambda s: "tl::turn_pass();" in s, loop)
    turn = find(lambda s: "tl::turn_wait();" in s, loop)
    committed = find(lambda s: "commit_group" in s, turn or loop)
    end = find(lambda s: s == "    }", committed or loop)
    if None in (wait_full, first_turn, handed, turn, committed, end) or \
            "wait_group_sync_aligned_0" not in lines[committed + 1]:
        return source
    counters, waits = lines[loop + 1:wait_full], lines[wait_full]
    s_issue = lines[first_turn + 3:handed]          # S = Q Kᵀ: zeroed, issued, committed
    s_waited = lines[handed + 1:handed + 3]         # wgmma.wait_group 0 and its fence
    softmax = lines[handed + 3:turn]
    pv_issue = lines[turn + 1:committed + 1]        # O += P V, issued and committed
    release = lines[committed + 3]
    assert "mbar_arrive_warp" in release, release

    def at(block, value):
        return [re.sub(r"\bkey_block\b", value, line) for line in block]

    before = ["    {", *at(counters + [waits], "0"), "    tl::turn_first();",
              *at(s_issue, "0"), "    tl::turn_pass();", *s_waited, "    }"]
    body = [f"    for (int key_block = 0; key_block < {n - 1}; ++key_block) {{", *counters,
            *softmax, *at([waits], "(key_block + 1)"), "      tl::turn_wait();", *pv_issue,
            *at(s_issue, "(key_block + 1)"), "      tl::turn_pass();",
            '      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");',
            "      tl::wgmma_fence_registers<64>((&(output_ptr[0])));", release, *s_waited,
            "    }"]
    after = ["    {", *at(counters + softmax, str(n - 1)), "      tl::turn_wait();",
             *at(pv_issue, str(n - 1)),
             "      tvm_builtin_ptx_wgmma_wait_group_wait_group_sync_aligned_0();",
             "      tl::wgmma_fence_registers<64>((&(output_ptr[0])));",
             *at([release], str(n - 1)), "    }"]
    return strip_traps("\n".join(lines[:loop] + before + body + after + lines[end + 1:]))


VARIANTS = {"default": None, "no_traps": strip_traps, "turn_rotated": rotate_turns}


def main() -> None:
    out, chosen = Path(sys.argv[1]), sys.argv[2].split(",")
    compile_cuda, edit = nvcc.compile_cuda, {"f": None, "edited": 0}

    def edited(source, arch, fast_math=False):
        if edit["f"] is not None:
            changed = edit["f"](source)
            edit["edited"] += changed != source
            source = changed
        return compile_cuda(source, arch, fast_math)

    nvcc.compile_cuda = edited  # finish_cuda looks the function up at each compile
    results = {"device": torch.cuda.get_device_name(), "rows": [],
               "command": "python bench/fa_turn_rotation.py " + " ".join(sys.argv[1:])}
    for i, name in enumerate(chosen):
        edit["f"], edit["edited"] = VARIANTS[name], 0
        row = fa_variants.measure(f"{name}_{i}", 128, False, {})
        row["edited_compiles"] = edit["edited"]
        results["rows"].append(row)
        print(f"{row['name']:20} {row['ms']:.3f} ms  sdpa {row['sdpa_ms']:.3f} ms  "
              f"x{row['ratio']:.3f}  {'ok' if row['ok'] else 'FAIL'}  "
              f"edited {edit['edited']}", flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
