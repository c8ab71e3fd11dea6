"""swapffn.kernel_profile's pure parts (the tables themselves need a GPU: scripts/step_breakdown.py and
examples/lm/bench.py --profile run them there)."""
from swapffn.kernel_profile import kind_of, union_us


def test_kind_of_drops_template_arguments_parameters_and_anonymous_namespaces():
    name = "void swapffn::cuda::(anonymous namespace)::sm90_kernel<true, 4>(CUtensorMap, Params)"
    assert kind_of(name) == "swapffn::cuda::sm90_kernel"
    assert kind_of("nvjet_sm90_tss_64x64_64x8") == "nvjet_sm90_tss_64x64_64x8"
    assert len(kind_of("k" * 100)) == 70


def test_union_us_counts_overlaps_once():
    assert union_us([]) == 0
    assert union_us([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
