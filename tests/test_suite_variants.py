"""bench/gpu_suite.py's second builds for A/B runs (`build --variant`, then `ab` on a GPU):
a variant adds pass configs to those a row already names, never replaces them."""

from tests.test_gpu_suite import _suite_module


def test_a_variant_keeps_the_rows_own_pass_configs():
    suite = _suite_module()
    sizes = {"shape": (4, 32, 4096, 128),
             "options": {"block_m": 128, "pass_configs": {"tl.disable_warp_specialized": True}}}
    varied = suite.with_configs(sizes, {"tl.disable_alignment_check_once": True})
    assert varied["options"] == {"block_m": 128, "pass_configs": {
        "tl.disable_warp_specialized": True, "tl.disable_alignment_check_once": True}}
    assert varied["shape"] == sizes["shape"]
    assert sizes["options"]["pass_configs"] == {"tl.disable_warp_specialized": True}
    assert suite.with_configs({"N": 8}, {"k": 1}) == {"N": 8, "options": {"pass_configs": {"k": 1}}}


def test_suite_rows_have_distinct_names():
    suite = _suite_module()
    for rows in (suite.CHECKS, suite.BENCH):
        names = [row[0] for row in rows]
        assert len(names) == len(set(names))
